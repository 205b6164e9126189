"""A suite's ``launcher:`` block (``posbench.run.suite.launcher``): the suite's keys, a profile's
over them, ``--set launcher.KEY=VALUE`` over both; a misspelt key or a bad value is one line
naming where it stands and what is allowed; ``bench.py schema`` names the same keys; the values
reach submitit's Slurm executor; none of it changes the run id."""

import jsonschema
import pytest

from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError
from tests.helpers.marks import needs_binaries
from tests.helpers.suites import VALID

BLOCK = """\
launcher:
  partition: learnfair
  account: posbench
  time_min: 720
  gpus_per_task: 2
  array_parallelism: 32
  mem_gb: 64
  setup: [module load cuda]
  additional: {exclude: node3}
"""
PROFILE = """\
  gpu:
    launcher:
      partition: dev
      time_min: 30
"""


def _suite(tmp_path, block=BLOCK, profile=PROFILE):
    path = tmp_path / "t.yaml"
    path.write_text(VALID + profile + block)
    return path


def _error(tmp_path, block=BLOCK, profile=PROFILE, profile_name=None, sets=None) -> str:
    with pytest.raises(SuiteError) as info:
        loaded = suitemod.load(_suite(tmp_path, block, profile))
        suitemod.resolve(loaded, profile_name or "default", sets)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_profile_overrides_the_suites_launcher_keys_and_set_overrides_both(tmp_path):
    loaded = suitemod.load(_suite(tmp_path))
    base = suitemod.resolve(loaded, "default").launcher
    assert (base.partition, base.account, base.time_min, base.gpus_per_task, base.array_parallelism) == (
        "learnfair",
        "posbench",
        720,
        2,
        32,
    )
    assert base.mem_gb == 64 and base.setup == ["module load cuda"] and base.additional == {"exclude": "node3"}
    gpu = suitemod.resolve(loaded, "gpu").launcher
    assert (gpu.partition, gpu.time_min, gpu.account, gpu.array_parallelism) == ("dev", 30, "posbench", 32)
    cli = suitemod.resolve(loaded, "gpu", {"launcher.time_min": 5, "launcher.qos": "high"}).launcher
    assert (cli.partition, cli.time_min, cli.qos) == ("dev", 5, "high")
    # where the sweep runs is not what it measures: the run id's fingerprint ignores it
    assert (
        suitemod.resolve(loaded, "default").fingerprint()
        == suitemod.resolve(loaded, "default", {"launcher.partition": "other"}).fingerprint()
    )


def test_no_launcher_block_gives_the_defaults(tmp_path):
    launcher = suitemod.resolve(suitemod.load(_suite(tmp_path, "", "")), "default").launcher
    assert launcher.partition is None and launcher.time_min == 240 and launcher.array_parallelism == 64


@pytest.mark.parametrize(
    "block, profile, profile_name, sets, expected",
    [
        (
            BLOCK.replace("gpus_per_task", "gpus_per_tsk"),
            PROFILE,
            None,
            None,
            "t.yaml:26: launcher.gpus_per_tsk: unknown key; allowed: partition, account,",
        ),
        (
            BLOCK,
            PROFILE.replace("time_min: 30", "time_mins: 30"),
            "gpu",
            None,
            "t.yaml:21: profiles.gpu.launcher.time_mins: unknown key; allowed: partition,",
        ),
        (
            BLOCK.replace("time_min: 720", "time_min: 0"),
            PROFILE,
            None,
            None,
            "t.yaml:25: launcher.time_min: must be greater than or equal to 1 (got 0); allowed: >= 1",
        ),
        (
            BLOCK.replace("partition: learnfair", "partition: 3"),
            PROFILE,
            None,
            None,
            "t.yaml:23: launcher.partition: must be a valid string (got 3); allowed: a string",
        ),
        (
            BLOCK.replace("array_parallelism: 32", "array_parallelism: many"),
            PROFILE,
            None,
            None,
            "launcher.array_parallelism: must be a valid integer (got 'many'); allowed: an integer",
        ),
        (
            BLOCK.replace("setup: [module load cuda]", "setup: module load cuda"),
            PROFILE,
            None,
            None,
            "launcher.setup: must be a valid list",
        ),
        (
            BLOCK,
            PROFILE.replace("partition: dev", "gpus_per_task: -1"),
            "gpu",
            None,
            "t.yaml:20: profiles.gpu.launcher.gpus_per_task: must be greater than or equal to 0 (got -1); allowed: >= 0",
        ),
        (
            BLOCK,
            PROFILE,
            None,
            {"launcher.partiton": "dev"},
            "--set launcher.partiton: launcher.partiton: unknown key; allowed: partition, account,",
        ),
        (
            BLOCK,
            PROFILE,
            None,
            {"launcher.mem_gb": 0},
            "--set launcher.mem_gb: launcher.mem_gb: must be greater than 0 (got 0); allowed: > 0.0",
        ),
        (
            "launcher: learnfair\n",
            PROFILE,
            None,
            None,
            "t.yaml:22: launcher: must be a valid dictionary (got 'learnfair'); allowed: a mapping",
        ),
    ],
)
def test_a_bad_launcher_key_or_value_is_one_line_naming_where_and_what_is_allowed(
    tmp_path, block, profile, profile_name, sets, expected
):
    assert expected in _error(tmp_path, block, profile, profile_name, sets)


def test_validate_checks_every_profiles_launcher_block(tmp_path):
    # load() checks the file in full: a profile nobody asked for is still checked
    with pytest.raises(SuiteError, match=r"profiles\.gpu\.launcher\.time_min: must be greater"):
        suitemod.load(_suite(tmp_path, profile=PROFILE.replace("time_min: 30", "time_min: 0")))


def _yaml(path):
    import yaml

    return yaml.safe_load(path.read_text())


def test_the_schema_names_the_launcher_keys_in_the_suite_and_its_profiles(tmp_path):
    schema = suitemod.schema()
    validator = jsonschema.Draft202012Validator(schema)
    assert "partition" in schema["$defs"]["Launcher"]["properties"]
    data = _yaml(_suite(tmp_path))
    assert list(validator.iter_errors(data)) == []
    for where in (data["launcher"], data["profiles"]["gpu"]["launcher"]):
        where["gpus_per_tsk"] = 1
        (error,) = validator.iter_errors(data)
        error = jsonschema.exceptions.best_match([error])  # a profile's block may also be null (anyOf)
        assert "gpus_per_tsk" in error.message and "Additional properties are not allowed" in error.message
        del where["gpus_per_tsk"]
    data["launcher"]["time_min"] = "a day"
    (error,) = validator.iter_errors(data)
    assert list(error.absolute_path) == ["launcher", "time_min"]


@needs_binaries("srun", "sbatch")  # submitit's SlurmExecutor asks for srun when built
def test_the_launcher_block_reaches_submitits_slurm_executor(tmp_path):
    pytest.importorskip("submitit")
    from posbench.run import slurm

    loaded = suitemod.load(_suite(tmp_path))
    suite = suitemod.resolve(loaded, "default", {"launcher.cpus_per_task": 4})
    ex = slurm.executor("slurm", tmp_path / "jobs", suite, "cuda")
    text = ex._make_submission_file_text("python -m x", "uid")  # the sbatch script submitit writes
    for line in (
        "--partition=learnfair",
        "--account=posbench",
        "--time=720",
        "--gpus-per-task=2",
        "--cpus-per-task=4",
        "--mem=65536M",
        "--exclude=node3",
    ):
        assert f"#SBATCH {line}" in text, line
    assert "module load cuda" in text
    # array_parallelism is the array's throttle (%N on --array), asked of the executor, not a line
    assert ex.parameters["array_parallelism"] == 32
    local = slurm.executor("local", tmp_path / "jobs", suite, "cpu")
    assert local.parameters["timeout_min"] == 720 and local.parameters["gpus_per_node"] == 2
