"""A real single-node Slurm (Debian's slurm-wlm 22.05) in a private folder, for the cluster tests.

No systemd: munged, mariadbd, slurmdbd, slurmctld and slurmd are started by hand with their own
config, sockets, ports and state under one folder, and stopped by PID. Accounting goes through
slurmdbd because submitit asks `sacct` for jobs that have left the queue (without it a cancelled
job stays UNKNOWN). `AuthInfo=cred_expire=10`: a requeued job may start again after 10 s, not 120 s.
Clients find this cluster through SLURM_CONF (`env()`). Needs root and the packages that
`.ci/slurm` installs; `available()` says why not when they are missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

DAEMONS = ("munged", "mariadbd", "mysql_install_db", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct")
CLUSTER = "uhtest"


def available() -> str | None:
    """None when this machine can run the cluster, else why not (for pytest.skip)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}; .ci/slurm installs it)"
    if os.geteuid() != 0:
        return "the private Slurm cluster runs its daemons as root"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """One node (this machine, all its CPUs), one partition `debug`; start() brings it up, stop() ends it."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.conf = self.root / "slurm.conf"
        self.pids: list[tuple[str, Path]] = []  # (daemon, pid file), in start order

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_configs(self) -> None:
        r, host = self.root, socket.gethostname()
        for sub in ("munge", "db", "ctld", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o700)
        self.db_port, self.dbd_port, self.ctld_port, self.d_port = (free_port() for _ in range(4))
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        auth = f"AuthInfo=cred_expire=10,socket={r}/munge/munge.socket"
        self.conf.write_text(
            f"""ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
{auth}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
StateSaveLocation={r}/ctld
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={r}/munge/munge.socket
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
KillWait=5
MinJobAge=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mb * 3 // 4} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        dbd = r / "slurmdbd.conf"
        dbd.write_text(
            f"""{auth}
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
PidFile={r}/slurmdbd.pid
LogFile={r}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass=uh
StorageLoc=slurm_acct_db
"""
        )
        dbd.chmod(0o600)

    def _start(self, name: str, command: list[str], pid_file: Path, ready: Callable[[], bool] | None = None) -> None:
        subprocess.run(command, check=True, env=self.env(), capture_output=True, timeout=60)
        self.pids.append((name, pid_file))
        self._wait(lambda: pid_file.exists() and (ready is None or ready()), f"{name} did not start")

    def _wait(self, ok: Callable[[], bool], message: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in (self.root / "log").glob("*.log"))
                raise RuntimeError(f"{message}; logs:\n{logs}")
            time.sleep(0.2)

    def _sql(self, statement: str) -> bool:
        client = shutil.which("mariadb") or shutil.which("mysql") or "mysql"
        out = subprocess.run(
            [client, f"--socket={self.root}/db/mysql.sock", "-u", "root", "-e", statement],
            capture_output=True,
            text=True,
        )
        return out.returncode == 0

    def start(self) -> SlurmCluster:
        """Bring every daemon up (about 3 s on a quiet machine); on any failure stop those already up."""
        try:
            return self._start_all()
        except BaseException:
            self.stop()
            raise

    def _start_all(self) -> SlurmCluster:
        r = self.root
        self._write_configs()
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._start(
            "munged",
            [
                _binary("munged"),
                f"--socket={r}/munge/munge.socket",
                f"--key-file={key}",
                f"--pid-file={r}/munge/munged.pid",
                f"--log-file={r}/log/munged.log",
                f"--seed-file={r}/munge/munged.seed",
                "--force",
            ],
            r / "munge" / "munged.pid",
        )
        subprocess.run(
            [
                _binary("mysql_install_db"),
                "--no-defaults",
                f"--datadir={r}/db/data",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        mariadbd = [
            _binary("mariadbd"),
            "--no-defaults",
            f"--datadir={r}/db/data",
            f"--socket={r}/db/mysql.sock",
            f"--port={self.db_port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--user=root",
            f"--pid-file={r}/db/mariadbd.pid",
            f"--log-error={r}/log/mariadbd.log",
            "--innodb-buffer-pool-size=32M",
        ]
        subprocess.Popen(mariadbd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.pids.append(("mariadbd", r / "db" / "mariadbd.pid"))
        self._wait(lambda: self._sql("SELECT 1"), "mariadbd did not start")
        self._sql(
            "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'uh'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'"
        )
        self._start("slurmdbd", [_binary("slurmdbd")], r / "slurmdbd.pid", self._dbd_up)
        self._start("slurmctld", [_binary("slurmctld"), "-f", str(self.conf)], r / "slurmctld.pid")
        self._start(
            "slurmd",
            [_binary("slurmd"), "-f", str(self.conf), "-N", socket.gethostname()],
            r / "slurmd.pid",
            self._node_idle,
        )
        return self

    def _dbd_up(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.dbd_port)) == 0

    def _node_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env(), capture_output=True, text=True)
        return out.stdout.strip() in ("idle", "mixed", "allocated")

    def stop(self) -> None:
        """Cancel what is left, then stop each daemon by its PID, last started first."""
        subprocess.run(["scancel", "--full", f"--cluster={CLUSTER}", "-u", "root"], env=self.env(), capture_output=True)
        for _name, pid_file in reversed(self.pids):
            try:
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                continue
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.pids.clear()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")
