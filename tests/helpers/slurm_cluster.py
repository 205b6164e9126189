"""A one-node Slurm cluster in a temporary folder, for the launched-sweep test.

``start(folder)`` starts munged (its own socket), slurmctld and slurmd as root with a one-node
``slurm.conf`` (this machine, its CPUs, one partition ``debug``), waits until the node is idle
and returns the environment (``SLURM_CONF``) that sbatch, squeue and scontrol need; ``stop``
ends the daemons. Where that cannot happen (not root, Debian's ``slurm-wlm`` or ``munge`` not
installed, a daemon that does not come up) ``start`` raises ``Unavailable`` with the reason,
which the test turns into a skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
MUNGE_KEY = Path("/etc/munge/munge.key")


class Unavailable(Exception):
    """Why a Slurm cluster cannot be started here."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(folder: Path, host: str, cpus: int) -> str:
    return f"""\
ClusterName=posbench
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.sock
CredType=cred/munge
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def start(folder: Path) -> dict[str, str]:
    """Start the cluster; the environment its client commands need."""
    if os.geteuid() != 0:
        raise Unavailable("not root: slurmctld, slurmd and munged are started as root here")
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        raise Unavailable(f"{', '.join(absent)} not installed (apt-get install slurm-wlm munge)")
    if not MUNGE_KEY.is_file():
        raise Unavailable(f"no {MUNGE_KEY} (the munge package creates it)")
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    (folder / "slurm.conf").write_text(_conf(folder, host, os.cpu_count() or 1))
    env = dict(os.environ, SLURM_CONF=str(folder / "slurm.conf"))
    daemons = [
        [
            "munged",
            "--force",
            f"--socket={folder}/munge.sock",
            f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/munged.log",
            f"--seed-file={folder}/munged.seed",
            f"--key-file={MUNGE_KEY}",
        ],
        ["slurmctld", "-c", "-i"],  # -c: a clean state (no jobs of an earlier cluster)
        ["slurmd", "-c"],
    ]
    for cmd in daemons:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            stop(folder)
            raise Unavailable(f"{cmd[0]} did not start (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}")
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip().rstrip("*") in ("idle", "mixed"):
            return env
        time.sleep(0.5)
    log = (folder / "slurmd.log").read_text()[-300:] if (folder / "slurmd.log").exists() else ""
    stop(folder)
    raise Unavailable(f"the node did not become idle within 40 s: {log.strip()}")


def stop(folder: Path) -> None:
    """End slurmd, slurmctld and munged (by the pids they wrote): SIGTERM, and SIGKILL after 2 s."""
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = folder / f"{name}.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):  # a daemon of this temporary cluster only
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            for _ in range(20):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                continue
            break
