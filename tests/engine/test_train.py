"""The training loop: schedule, determinism, divergence, checkpoints, budgets, precision."""

import math

import pytest
import torch

from posbench.engine.saved_model import load_checkpoint
from posbench.engine.train import Diverged, TrainConfig, autocast_dtype, lr_at, save_trained, train
from tests.helpers.training import repeating_batches, small_model


def test_lr_schedule_warmup_then_cosine():
    cfg = TrainConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1, steps=110)
    assert lr_at(0, cfg, 110) == pytest.approx(0.1)
    assert lr_at(9, cfg, 110) == pytest.approx(1.0)
    assert lr_at(10, cfg, 110) == pytest.approx(1.0)
    assert lr_at(60, cfg, 110) == pytest.approx(0.55)  # half way down the cosine
    assert lr_at(110, cfg, 110) == pytest.approx(0.1)


def test_budget_in_tokens_or_steps():
    assert TrainConfig(seq_len=16, batch_size=4, tokens=640).total_steps() == 10
    assert TrainConfig(steps=7).total_steps() == 7
    with pytest.raises(ValueError, match="exactly one of steps or tokens"):
        TrainConfig(steps=3, tokens=100).total_steps()
    with pytest.raises(ValueError, match="at least one step"):
        TrainConfig(seq_len=16, batch_size=4, tokens=10).total_steps()


def test_training_learns_and_is_deterministic(tmp_path):
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=60, lr=3e-3, warmup_steps=5, log_every=5)
    model_a = small_model()
    a = train(model_a, repeating_batches(), cfg)
    save_trained(tmp_path / "a.pt", model_a, cfg, a)
    b = train(small_model(), repeating_batches(), cfg)
    assert a.curve == b.curve  # bit-identical on CPU under the same seeds
    assert a.curve[-1][1] < 0.5 * a.curve[0][1]  # counting is learnable
    # Starts no better than uniform: with fairseq's unit-scale tied embeddings an untrained model
    # leans towards repeating the current token, which this counting stream never does.
    assert a.curve[0][1] > 0.9 * math.log(16)
    assert a.tokens == 60 * 4 * 16 and a.steps == 60


def test_until_stops_on_the_full_runs_trajectory(tmp_path):
    # Train to criterion: the budget still sets the lr schedule, so stopping at step 7 of 20 leaves
    # exactly the model a 20-step run has after 7 steps, and the result counts 7 steps.
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=20, lr=3e-3, warmup_steps=3, log_every=5)
    snapshots, asked = {}, []
    full = small_model()

    def watch(done):
        snapshots[done] = {k: v.clone() for k, v in full.state_dict().items()}
        return False

    whole = train(full, repeating_batches(), cfg, until=watch)
    assert not whole.stopped_early and whole.steps == 20 and sorted(snapshots) == list(range(1, 20))

    def at_seven(done):
        asked.append(done)
        return done == 7

    stopped_model = small_model()
    r = train(stopped_model, repeating_batches(), cfg, until=at_seven)
    save_trained(tmp_path / "s.pt", stopped_model, cfg, r)
    assert asked == list(range(1, 8)) and r.stopped_early
    assert (r.steps, r.tokens) == (7, 7 * 4 * 16)
    assert r.curve[-1][0] == 6 and [s for s, _ in r.curve] == [0, 5, 6]  # the last step's loss is logged
    assert r.curve[:2] == whole.curve[:2]
    for k, v in stopped_model.state_dict().items():
        assert torch.equal(v, snapshots[7][k]), k
    assert load_checkpoint(tmp_path / "s.pt")[1]["result"]["stopped_early"] is True


def test_checkpoint_round_trip(tmp_path):
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=3, warmup_steps=1)
    model = small_model("rotary")
    save_trained(tmp_path / "ck" / "model.pt", model, cfg, train(model, repeating_batches(), cfg))
    restored, meta = load_checkpoint(tmp_path / "ck" / "model.pt")
    idx = torch.randint(0, 16, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(idx), restored(idx))
    assert meta["train_config"]["steps"] == 3 and meta["result"]["steps"] == 3
    assert not (tmp_path / "ck" / "model.pt.tmp").exists()


def test_non_finite_loss_raises_diverged():
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=20, lr=1e30, warmup_steps=1, log_every=1, grad_clip=1e30)
    with pytest.raises(Diverged, match="loss became"):
        train(small_model(), repeating_batches(), cfg)


def test_precision_choices():
    assert autocast_dtype("auto", torch.device("cpu")) is None
    assert autocast_dtype("float32", torch.device("cpu")) is None
    with pytest.raises(ValueError, match="needs a CUDA device"):
        autocast_dtype("bfloat16", torch.device("cpu"))
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast_dtype("fp8", torch.device("cpu"))


def test_cuda_precision_choice_with_fake_bf16_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert autocast_dtype("auto", torch.device("cuda")) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert autocast_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert autocast_dtype("float16", torch.device("cuda")) == torch.float16


# --- security (issue 13's hardening)


def test_planted_checkpoint_does_not_run_code(tmp_path):
    import torch

    from posbench.engine.saved_model import load_checkpoint

    marker = tmp_path / "pwned"

    class Planted:
        def __reduce__(self):
            return exec, (f"open({str(marker)!r}, 'w').write('ran')",)

    path = tmp_path / "model.pt"
    torch.save({"model_config": Planted(), "model": {}}, path)
    with pytest.raises(ValueError, match=r"model.pt: not a plain posbench checkpoint, refused without running it"):
        load_checkpoint(path)
    assert not marker.exists()
