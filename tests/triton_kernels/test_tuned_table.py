"""The tile table timed on a GPU (posbench/triton_kernels/tuned_table.py, tune.py; issue 54): a committed
table for the device's architecture is read by default, no autotuning unless POSBENCH_AUTOTUNE=1,
and without a table the offline choice stays; the tuner's choices with a fake clock and timer.
The CUDA boundary (device_arch, the launch) is faked: no GPU here."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("triton")

from posbench.triton_kernels import autograd, tile_configs, tune, tuned_table  # noqa: E402
from posbench.triton_kernels.bias_spec import ALIBI, BiasSpec  # noqa: E402
from posbench.triton_kernels.checks import INTERPRETED  # noqa: E402

TABLE = {
    "fwd/float16/d64/alibi": [128, 64, 8, 3],
    "dkdv/float16/d64/alibi": [32, 128, 8, 3],
    "dq/float16/d64/alibi": [128, 32, 8, 3],
}


def _write(folder, arch=90, configs=TABLE, **extra):
    (folder / f"sm{arch}.json").write_text(json.dumps({"version": 1, "arch": arch, "configs": configs, **extra}))


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_table, "TUNED_DIR", tmp_path)
    monkeypatch.delenv("POSBENCH_AUTOTUNE", raising=False)
    return tmp_path


def test_a_table_for_the_arch_is_read_and_its_absence_keeps_the_offline_choice(tuned_dir):
    _write(tuned_dir)
    assert tile_configs.choose_blocks("fwd", 90, torch.float16, 64, "alibi") == (128, 64, 8, 3)
    assert tile_configs.choose_blocks("dq", 90, torch.float16, 64, "alibi") == (128, 32, 8, 3)
    # a key the table lacks, and an arch without a table: the first config offered offline
    assert (
        tile_configs.choose_blocks("fwd", 90, torch.float16, 64, "t5")
        == tile_configs.configs_for("fwd", 90, torch.float16, 64)[0].blocks()
        == (64, 32, 4, 2)
    )
    assert (
        tile_configs.choose_blocks("dkdv", 80, torch.float16, 64, "alibi")
        == tile_configs.configs_for("bwd", 80, torch.float16, 64)[0].blocks()
    )
    assert (
        tile_configs.choose_blocks("fwd", None, torch.float16, 64, "alibi") == tile_configs.INTERPRETER_CONFIG.blocks()
    )  # the interpreter


def test_a_row_names_each_kernels_tiles_and_where_they_came_from(tuned_dir, monkeypatch):
    _write(tuned_dir, configs={"fwd/float16/d64/alibi": [128, 64, 8, 3]})
    assert tile_configs.tiles_used(90, torch.float16, 64, "alibi") == (
        "fwd m128n64w8s3 (tuned sm90), dkdv m32n32w4s2 (offline), dq m32n32w4s2 (offline)"
    )
    monkeypatch.setenv("POSBENCH_AUTOTUNE", "1")
    assert tile_configs.tiles_used(90, torch.float16, 64, "alibi") == "fwd autotuned, dkdv autotuned, dq autotuned"


def test_autotuning_only_when_asked(tuned_dir, monkeypatch):
    _write(tuned_dir)
    monkeypatch.setenv("POSBENCH_AUTOTUNE", "1")
    assert tile_configs.choose_blocks("fwd", 90, torch.float16, 64, "alibi") is None  # None: triton.autotune over CONFIGS
    monkeypatch.setenv("POSBENCH_AUTOTUNE", "0")
    assert tile_configs.choose_blocks("fwd", 90, torch.float16, 64, "alibi") == (128, 64, 8, 3)


def test_a_call_launches_with_the_tables_blocks_per_kernel(tuned_dir, monkeypatch):
    """fused_attention on a (faked) sm_90: the forward, dK/dV and dQ each get their own tuned tiles;
    pinned blocks win; blocks_bwd pins both backward kernels."""
    _write(tuned_dir)
    seen = []
    monkeypatch.setattr(autograd, "INTERPRETED", False)
    monkeypatch.setattr(autograd, "device_arch", lambda device: 90)
    monkeypatch.setattr(autograd._FusedAttention, "apply", lambda *args: seen.append(args[-1]))
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    spec = BiasSpec(ALIBI, torch.zeros(2))
    autograd.fused_attention(q, q, q, spec)
    autograd.fused_attention(q, q, q, spec, blocks_fwd=(16, 16, 1, 1), blocks_bwd=(32, 32, 4, 2))
    autograd.fused_attention(
        q, q, q, BiasSpec(ALIBI, torch.zeros(2), key_bias=torch.zeros(1, 2, 8))
    )  # "alibi+key": not in the table
    assert seen == [
        ((128, 64, 8, 3), (32, 128, 8, 3), (128, 32, 8, 3)),
        ((16, 16, 1, 1), (32, 32, 4, 2), (32, 32, 4, 2)),
        ((64, 32, 4, 2), (32, 32, 4, 2), (32, 32, 4, 2)),
    ]


def test_a_bad_or_foreign_table_is_one_line(tuned_dir):
    _write(tuned_dir, configs={"fwd/float16/d64/alibi": [128, 64, 8]})
    with pytest.raises(ValueError, match=r"configs\['fwd/float16/d64/alibi'\] must be \[BLOCK_M, BLOCK_N, warps, stages\]"):
        tuned_table.load_table(90, str(tuned_dir))
    (tuned_dir / "sm80.json").write_text(json.dumps({"version": 1, "arch": 90, "configs": {}}))
    with pytest.raises(ValueError, match="measured on sm90, not sm80"):
        tuned_table.load_table(80, str(tuned_dir))


def test_the_tuner_keeps_the_fastest_tile_per_kernel_and_writes_a_table_that_loads(tmp_path):
    """A fake timer (ms per candidate) and clock: the forward is chosen first, dK/dV is timed with
    the chosen forward and dQ's default, dQ with the chosen dK/dV; a failing candidate is noted."""
    candidates = {
        "fwd": [(128, 64, 8, 3), (64, 32, 4, 2)],
        "dkdv": [(32, 128, 8, 3), (32, 32, 4, 2)],
        "dq": [(128, 32, 8, 3), (32, 32, 4, 2)],
    }
    ms = {(128, 64, 8, 3): 1.0, (64, 32, 4, 2): 2.0, (32, 128, 8, 3): 5.0, (32, 32, 4, 2): 3.0, (128, 32, 8, 3): 9.0}
    calls = []

    def time_ms(point, fwd, dkdv, dq, backward):
        calls.append((fwd, dkdv, dq, backward))
        varied = fwd if not backward else dkdv if dq == (0, 0, 0, 0) else dq  # (0, 0, 0, 0): dQ's default
        if varied == (128, 32, 8, 3):
            raise RuntimeError("out of resource: shared memory, Required: 262144\nmore")
        return ms[varied]

    configs, timings, notes = tune.tune(
        [("float16", 64, "alibi")],
        time_ms,
        lambda kernel, point: (0, 0, 0, 0),
        budget_s=100,
        clock=iter(range(100)).__next__,
        candidates=candidates,
    )
    assert configs == {
        "fwd/float16/d64/alibi": [128, 64, 8, 3],
        "dkdv/float16/d64/alibi": [32, 32, 4, 2],
        "dq/float16/d64/alibi": [32, 32, 4, 2],
    }
    assert calls[2] == ((128, 64, 8, 3), (32, 128, 8, 3), (0, 0, 0, 0), True)  # dK/dV with dQ's default
    assert calls[4][:2] == ((128, 64, 8, 3), (32, 32, 4, 2))  # dQ with the chosen dK/dV
    assert timings["fwd/float16/d64/alibi"] == {"m128n64w8s3": 1.0, "m64n32w4s2": 2.0}
    assert notes == ["dq/float16/d64/alibi (128, 32, 8, 3): RuntimeError: out of resource: shared memory, Required: 262144"]
    path = tune.write_table(tmp_path, 90, "NVIDIA H200", configs, timings, notes, {}, {})
    assert path.name == "sm90.json" and tuned_table.load_table(90, str(tmp_path))["dq/float16/d64/alibi"] == (32, 32, 4, 2)


def test_the_tuner_stops_starting_points_when_its_budget_is_spent():
    clock = iter([0, 0, 50, 200]).__next__  # start, point 1 at 0 s, point 2 at 50 s, point 3 at 200 s
    configs, _, notes = tune.tune(
        tune.points(("bfloat16",), (64,), ("alibi", "none", "t5")),
        lambda *args: 1.0,
        lambda kernel, point: (32, 32, 4, 2),
        budget_s=100,
        clock=clock,
    )
    assert {key.split("/")[-1] for key in configs} == {"alibi", "none"}
    assert notes == ["budget of 100 s spent: 1 points not tuned (offline choice kept)"]


def test_tune_needs_cuda_and_names_unknown_biases(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the real tuner would run")
    assert tune.main(["--biases", "alibi"]) == 2
    assert capsys.readouterr().err.strip() == "tune needs a CUDA GPU, with POSBENCH_AUTOTUNE unset"
    with pytest.raises(SystemExit):
        tune.main(["--biases", "alibi,wave"])
    assert "unknown bias(es) ['wave']; allowed: alibi, none, t5" in capsys.readouterr().err


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_the_timer_runs_every_bias_the_tuner_knows_with_the_tiles_under_test(backward):
    """The tuner's own timer on this CPU (the interpreter runs the kernels; ``bench`` runs the step
    once and says 1 ms): every bias it names builds and runs, forward or backward, pinned tiles."""
    if not INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest)")
    ran = []
    time_ms, default = tune.make_timer("cpu", 90, seq_len=24, batch=1, heads=2, bench=lambda fn: ran.append(fn()) or 1.0)
    blocks = (16, 16, 1, 1)
    for bias in tune.BIASES:
        assert time_ms(("float16", 32, bias), blocks, blocks, blocks, backward) == 1.0
    assert len(ran) == len(tune.BIASES)
    assert default("dq", ("bfloat16", 64, "alibi")) == tile_configs.configs_for("bwd", 90, torch.bfloat16, 64)[0].blocks()
