"""The arbiter: each channel's resource pool, its history and the turn-taking rules, behind an HTTP API."""
