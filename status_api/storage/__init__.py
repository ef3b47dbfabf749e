"""SQLAlchemy (async) storage of the Status API: tables, repository (reads), write (the one
writer), outbox, registries, sessions, database. Only this package and ``status_api/service/``
touch the database (the relay imports ``outbox`` and ``database`` only)."""
