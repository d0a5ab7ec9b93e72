"""Durable storage: SQLAlchemy 2 async on SQLite (default) or PostgreSQL, schema managed by Alembic."""
