"""The migrated schema of an in-memory SQLite store, copied from a template migrated once
per process (every simulation opens such a store): see :func:`copy_memory_schema`."""

from __future__ import annotations

import threading
from typing import Any

import peewee as pw

from corvid_actors.db import migrations as schema_migrations
from corvid_actors.db.connect import open_database
from corvid_actors.db.migrations import Migration, migrate
from corvid_actors.db.models import build_models

#: (the migrations it was made with, a migrated in-memory database) — see copy_memory_schema
_memory_template: tuple[tuple[Migration, ...], pw.Database] | None = None
_memory_template_lock = threading.Lock()


def copy_memory_schema(models: Any, db: pw.SqliteDatabase) -> None:
    """Give a new in-memory SQLite database the migrated schema by copying it (SQLite's
    backup API) from one migrated once per process: every simulation opens one, and
    peewee generating the DDL of every table was about 4 ms of each (bench/simtime). The
    copy is the database ``migrate`` makes (tables, indexes, triggers, the recorded
    versions; a test that appends a migration gets a template of its own); each
    version's ``applied_at`` is set to now, as a migration run now would set it."""
    global _memory_template
    known = tuple(schema_migrations.MIGRATIONS)
    with _memory_template_lock:
        if _memory_template is None or _memory_template[0] != known:
            template = open_database("sqlite:///:memory:")
            template.connect()
            migrate(build_models(template), template, known)
            if _memory_template is not None:
                _memory_template[1].close()
            _memory_template = (known, template)
        _memory_template[1].connection().backup(db.connection())
    version = models.SchemaVersion
    version.update(applied_at=version.applied_at.default()).execute()
