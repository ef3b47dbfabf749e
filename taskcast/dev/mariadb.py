"""MariaDB servers from local processes: a primary that writes a binary log (what point-in-time
recovery and replication need) and replicas of it (GTID replication), each a foreground
``mariadbd`` with its data directory, socket and log under one work directory.

The same commands an operator runs (docs/operations.md) are the ones used here: ``mariadb`` for
SQL, ``mariadb-dump`` for backups, ``mariadb-binlog`` for binlog replay; :meth:`MariaDB.client`
is the argv prefix every one of them takes to reach this server as root over its socket.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from taskcast.dev.procs import Proc, free_port

USER = "taskcast"
PASSWORD = "taskcast"
REPLICATION_USER = "replicator"
REPLICATION_PASSWORD = "replicator"


@dataclass
class MariaDB:
    """One server; ``server_id`` must differ between a primary and its replicas."""

    workdir: Path
    server_id: int = 1
    port: int = field(default_factory=free_port)
    proc: Proc | None = None

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    @property
    def socket(self) -> Path:
        return self.workdir / "mysql.sock"

    @property
    def binlog_dir(self) -> Path:
        return self.workdir / "binlog"

    def url(self, database: str) -> str:
        return f"mysql+asyncmy://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}?charset=utf8mb4"

    def client(self, tool: str = "mariadb") -> list[str]:
        """``[tool, --no-defaults, --socket=…, -uroot]``: the argv prefix of a client tool."""
        return [tool, "--no-defaults", f"--socket={self.socket}", "-uroot"]

    def app_sql(self, statements: str, database: str = "") -> str:
        """Run ``statements`` as the application user over TCP (what the services connect as)."""
        argv = [
            "mariadb",
            "--no-defaults",
            "-h127.0.0.1",
            f"-P{self.port}",
            f"-u{USER}",
            f"-p{PASSWORD}",
            "-N",
            "-B",
        ]
        run = subprocess.run([*argv, *([database] if database else [])], input=statements,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"mariadb failed: {run.stderr.strip()}")
        return run.stdout

    def sql(self, statements: str, database: str = "", *, headers: bool = False) -> str:
        """Run ``statements`` as root (batch mode, tab-separated output; column names first
        with ``headers``)."""
        argv = [*self.client(), *([] if headers else ["-N"]), "-B", *([database] if database else [])]
        run = subprocess.run(argv, input=statements, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"mariadb failed: {run.stderr.strip()}")
        return run.stdout

    def process(self) -> Proc:
        """The server's :class:`Proc` (created, not started, the first time; a data directory
        is initialised then)."""
        if self.proc is None:
            self.binlog_dir.mkdir(parents=True, exist_ok=True)
            if not self.datadir.exists():
                subprocess.run(
                    ["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}", "--user=root",
                     "--auth-root-authentication-method=socket", "--skip-test-db"],
                    check=True, capture_output=True, timeout=300,
                )  # fmt: skip
            argv = [
                "mariadbd", "--no-defaults", f"--datadir={self.datadir}", f"--socket={self.socket}",
                f"--port={self.port}", "--bind-address=127.0.0.1", "--user=root",
                f"--pid-file={self.workdir / 'mysql.pid'}", f"--log-error={self.workdir / 'mysql.err'}",
                "--skip-name-resolve", "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci", "--innodb-buffer-pool-size=64M",
                f"--server-id={self.server_id}", f"--log-bin={self.binlog_dir / 'binlog'}",
                "--binlog-format=ROW", "--log-slave-updates=ON", "--max-connections=300",
            ]  # fmt: skip
            self.proc = Proc(f"mariadb{self.server_id}", argv, None, self.workdir / "mariadbd.log")
        return self.proc

    def start(self, timeout: float = 120.0) -> MariaDB:
        self.process().start()
        self.wait_ready(timeout)
        self.sql(
            f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';\n"
            f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1';\n"
            # as an application account should be: read_only (a standby replica) applies to it
            f"REVOKE READ_ONLY ADMIN ON *.* FROM '{USER}'@'127.0.0.1';\n"
            f"CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'127.0.0.1' "
            f"IDENTIFIED BY '{REPLICATION_PASSWORD}';\n"
            f"GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'127.0.0.1';\n"
        )
        return self

    def wait_ready(self, timeout: float) -> None:
        proc = self.process()
        deadline = time.monotonic() + timeout
        while True:
            ping = subprocess.run([*self.client("mariadb-admin"), "ping"], capture_output=True, timeout=30)
            if ping.returncode == 0:
                return
            if proc.returncode is not None:
                raise RuntimeError(f"{proc.name} exited:\n{(self.workdir / 'mysql.err').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.name} not ready within {timeout}s")
            time.sleep(0.1)  # polling interval of a bounded wait

    def replicate_from(self, primary: MariaDB) -> None:
        """Start GTID replication from ``primary`` (from its current position) and make this
        server read-only, as a standby replica is."""
        gtid = primary.sql("SELECT @@gtid_binlog_pos").strip()
        self.sql(
            f"SET GLOBAL gtid_slave_pos = '{gtid}';\n"
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
            f"MASTER_USER='{REPLICATION_USER}', MASTER_PASSWORD='{REPLICATION_PASSWORD}', "
            "MASTER_USE_GTID=slave_pos;\nSTART SLAVE;\nSET GLOBAL read_only = ON;\n"
        )

    def replica_status(self) -> dict[str, str]:
        """``SHOW SLAVE STATUS`` as a dict ({} when this server replicates from nobody)."""
        lines = self.sql("SHOW SLAVE STATUS", headers=True).splitlines()
        if len(lines) < 2:
            return {}
        return dict(zip(lines[0].split("\t"), lines[1].split("\t"), strict=False))

    def promote(self) -> None:
        """The documented promotion (docs/deploy.md): stop replicating, forget the primary,
        accept writes."""
        self.sql("STOP SLAVE;\nRESET SLAVE ALL;\nSET GLOBAL read_only = OFF;\n")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=60)
