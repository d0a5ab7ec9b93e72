"""Shared test helpers: a fake clock, scratch PostgreSQL databases, arbiter factories."""
