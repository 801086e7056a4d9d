"""Storage: one small interface (base.py), one SQL implementation shared by SQLite and PostgreSQL."""
