"""A suite's ``launcher:`` block: how ``--launcher slurm`` submits the sweep (``posbench.run.slurm``).

It may stand at the top of a suite file, in a profile (its keys override the suite's) and in
``--set launcher.KEY=VALUE``. It says where and how long each array task (one unit) runs, never
what is measured, so it is not part of the run id: the same sweep submitted to another partition
lands in the same run folder and resumes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Launcher(BaseModel):
    """Slurm parameters of a launched sweep (``posbench.run.slurm``); submitit passes them to sbatch."""

    model_config = ConfigDict(extra="forbid", strict=True)

    partition: str | None = Field(None, description="Slurm partition (sbatch --partition)")
    account: str | None = Field(None, description="account charged (sbatch --account)")
    qos: str | None = Field(None, description="quality of service (sbatch --qos)")
    constraint: str | None = Field(None, description="node features (sbatch --constraint)")
    time_min: int = Field(240, ge=1, description="time limit of one array task (one unit), minutes")
    gpus_per_task: int | None = Field(
        None,
        ge=0,
        description="GPUs per array task; default: a case's nproc on "
        "CUDA (a multi-GPU case runs torchrun inside its task), 0 on a CPU",
    )
    cpus_per_task: int | None = Field(None, ge=1, description="CPU cores per array task (sbatch --cpus-per-task)")
    mem_gb: float | None = Field(None, gt=0, description="memory per array task, GiB (sbatch --mem)")
    array_parallelism: int = Field(
        64, ge=1, description="array tasks running at once (sbatch --array ...%N); the local launcher starts at most this many"
    )
    setup: list[str] = Field(default_factory=list, description="shell lines run before each task (module load ...)")
    additional: dict[str, str] = Field(default_factory=dict, description="other sbatch options, e.g. {exclude: node3}")
