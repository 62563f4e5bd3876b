"""Lightning-style hooks: the metrics each step hands over (val_loss, tokens, phase times, the
checkpoint saved) against the metrics file the run writes; the hooks' order; EarlyStopping and
ModelCheckpoint against the same rule applied by hand to an uninterrupted run's val_loss; the
callbacks' state beside every checkpoint, asynchronous saves included."""
import json
import math

import pytest

import keel


def with_train(config, **train):
    return dict(config, train=dict(config["train"], **train))


def val_losses(path):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(path)) if "val_loss" in r}


class Recorder(keel.Callback):
    def __init__(self):
        self.events = []

    def on_train_start(self, trainer):
        self.events.append(("start", trainer.global_step))

    def on_step_end(self, trainer, metrics):
        self.events.append(("step", metrics["step"]))

    def on_eval(self, trainer, metrics):
        self.events.append(("eval", metrics["step"], metrics["val_loss"]))

    def on_save(self, trainer, path):
        self.events.append(("save", path))

    def on_train_end(self, trainer):
        self.events.append(("end", trainer.global_step))

    def on_exception(self, trainer, error):
        self.events.append(("exception", type(error).__name__))


def test_step_metrics_match_the_metrics_file(config, tmp_path):
    cfg = with_train(config, steps=6, eval_every=2, log_every=1, checkpoint={"dir": str(tmp_path / "ck"), "every": 3})
    seen = []
    keel.Trainer(cfg).train(callback=seen.append)  # no steps: up to train.steps
    assert [m["step"] for m in seen] == [1, 2, 3, 4, 5, 6]
    logged = {r["step"]: r for r in map(json.loads, open(tmp_path / "metrics.jsonl"))}
    for m in seen:
        record = logged[m["step"]]
        assert m["loss"] == pytest.approx(record["loss"], rel=1e-6)
        assert m["tokens"] == record["tokens"] == m["step"] * 4 * 64
        assert set(m["time_ms"]) == {"data", "forward", "backward", "optimizer"}
        assert ("val_loss" in m) == (m["step"] % 2 == 0) == ("val_loss" in record)
        if "val_loss" in m:
            assert m["val_loss"] == pytest.approx(record["val_loss"], rel=1e-6)
        assert ("checkpoint" in m) == (m["step"] % 3 == 0)
    assert seen[2]["checkpoint"] == str(tmp_path / "ck" / "step-00000003")
    assert (tmp_path / "ck" / "step-00000006" / "manifest.json").exists()


def test_hooks_run_in_order_and_see_exceptions(config, tmp_path):
    cfg = with_train(config, steps=4, eval_every=2, checkpoint={"dir": str(tmp_path / "ck"), "every": 4})
    recorder = Recorder()
    trainer = keel.Trainer(cfg, callbacks=[recorder])
    trainer.train()
    kinds = [e[0] for e in recorder.events]
    assert kinds == ["start", "step", "step", "eval", "step", "step", "eval", "save", "end"]
    assert recorder.events[-2] == ("save", str(tmp_path / "ck" / "step-00000004"))
    trainer.train()  # at train.steps already: no step, the hooks still open and close
    assert [e[0] for e in recorder.events[-2:]] == ["start", "end"]

    class StopAtStart(keel.Callback):
        def on_train_start(self, trainer):
            trainer.should_stop = True

    stopped = Recorder()
    fresh = keel.Trainer(cfg, callbacks=[StopAtStart(), stopped])
    fresh.train()
    assert fresh.global_step == 0 and [e[0] for e in stopped.events] == ["start", "end"]

    def fail(metrics):
        raise RuntimeError("from the callback")

    failing = Recorder()
    with pytest.raises(RuntimeError, match="from the callback"):
        keel.Trainer(cfg, callbacks=[failing]).train(2, callback=fail)
    assert [e[0] for e in failing.events] == ["start", "step", "exception"]


def expected_stop(losses, patience, min_delta):
    """EarlyStopping's rule applied by hand: the step at which it stops, or None."""
    best, wait = math.inf, 0
    for step in sorted(losses):
        if losses[step] < best - min_delta:
            best, wait = losses[step], 0
        else:
            wait += 1
            if wait >= patience:
                return step
    return None


def test_early_stopping_stops_where_its_rule_says(config, tmp_path):
    base = with_train(config, steps=40, eval_every=2, log_every=1)
    reference = with_train(base, metrics_path=str(tmp_path / "reference.jsonl"))
    keel.Trainer(reference).train()
    losses = val_losses(tmp_path / "reference.jsonl")
    assert len(losses) == 20
    for patience, min_delta in ((2, 0.05), (1, 0.0), (3, 10.0), (0, 0.05)):
        want = expected_stop(losses, patience, min_delta)
        stopper = keel.EarlyStopping("val_loss", patience=patience, min_delta=min_delta)
        run = with_train(base, metrics_path=str(tmp_path / f"run-{patience}.jsonl"))
        trainer = keel.Trainer(run, callbacks=[stopper])
        trainer.train()
        print(f"patience {patience}, min_delta {min_delta}: stopped at {stopper.stopped_step}, rule says {want}")
        assert stopper.stopped_step == want
        assert trainer.global_step == (want if want is not None else 40)
    # min_delta 10: no check improves on the first, so it stops after `patience` more.
    assert expected_stop(losses, 3, 10.0) == 8


def test_model_checkpoint_keeps_the_best_val_loss(config, tmp_path):
    cfg = with_train(config, steps=20, eval_every=2, log_every=1)
    best = keel.ModelCheckpoint(tmp_path / "best")
    trainer = keel.Trainer(cfg, callbacks=[best])
    trainer.train()
    losses = val_losses(tmp_path / "metrics.jsonl")
    best_step = min(losses, key=lambda s: (losses[s], s))
    assert best.best == pytest.approx(losses[best_step], rel=1e-6)
    assert best.best_path == f"{tmp_path / 'best'}/step-{best_step:08d}"
    assert (tmp_path / "best" / "latest").read_text().strip() == f"step-{best_step:08d}"
    restored = keel.Trainer(cfg, resume=tmp_path / "best")
    assert restored.global_step == best_step
    assert restored.evaluate() == pytest.approx(losses[best_step], rel=1e-5)


def test_bad_arguments(config):
    with pytest.raises(ValueError, match="patience"):
        keel.EarlyStopping(patience=-1)
    with pytest.raises(ValueError, match="patience"):
        keel.EarlyStopping(patience=True)
    with pytest.raises(ValueError, match="mode"):
        keel.ModelCheckpoint("x", mode="lowest")


def test_a_resumed_run_stops_and_saves_where_an_unbroken_run_does(config, tmp_path):
    """EarlyStopping's and ModelCheckpoint's counters travel with the checkpoint: a run broken
    after step 32 (one check into a plateau) and resumed ends exactly as the unbroken run, and the resume would not without
    the saved state (a fresh EarlyStopping's rule over the later checks alone stops elsewhere)."""
    patience, min_delta = 3, 0.02

    def run(name):
        return with_train(config, steps=40, eval_every=2, log_every=1, metrics_path=str(tmp_path / f"{name}.jsonl"),
                          checkpoint={"dir": str(tmp_path / name / "checkpoints"), "every": 4})

    def callbacks(name):
        return [keel.EarlyStopping(patience=patience, min_delta=min_delta), keel.ModelCheckpoint(tmp_path / name / "best")]

    unbroken = callbacks("unbroken")
    whole = keel.Trainer(run("unbroken"), callbacks=unbroken)
    whole.train()
    losses = val_losses(tmp_path / "unbroken.jsonl")
    assert unbroken[0].stopped_step == expected_stop(losses, patience, min_delta)
    assert unbroken[0].stopped_step is not None and unbroken[0].stopped_step > 32
    later = {step: loss for step, loss in losses.items() if step > 32}
    assert expected_stop(later, patience, min_delta) != unbroken[0].stopped_step, "the test needs the counters to matter"

    first = keel.Trainer(run("broken"), callbacks=callbacks("broken"))
    first.train(32)
    first.close()
    saved = json.loads((tmp_path / "broken" / "checkpoints" / "step-00000032" / "callbacks.json").read_text())
    assert set(saved["callbacks"]) == {"EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}",
                                       "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'}"}
    resumed = callbacks("broken")
    second = keel.Trainer(run("broken"), resume="latest", callbacks=resumed)
    assert second.global_step == 32 and resumed[0].wait == saved["callbacks"][resumed[0].state_key]["wait"]
    second.train()
    assert second.global_step == whole.global_step == unbroken[0].stopped_step
    assert resumed[0].stopped_step == unbroken[0].stopped_step
    assert (resumed[0].best, resumed[0].wait) == (unbroken[0].best, unbroken[0].wait)
    assert resumed[1].best == unbroken[1].best
    assert resumed[1].best_path.replace("broken", "unbroken") == unbroken[1].best_path
    assert ((tmp_path / "broken" / "best" / "latest").read_text() ==
            (tmp_path / "unbroken" / "best" / "latest").read_text())

    # The same by folder, through Trainer.load.
    by_folder = callbacks("broken")
    third = keel.Trainer(run("broken"), callbacks=by_folder)
    third.load(tmp_path / "broken" / "checkpoints" / "step-00000032")
    assert by_folder[0].state_dict() == saved["callbacks"][by_folder[0].state_key]


def test_a_bad_callback_state_file_is_refused_naming_it(config, tmp_path):
    cfg = with_train(config, steps=2, checkpoint={"dir": str(tmp_path / "ck"), "every": 2})
    keel.Trainer(cfg, callbacks=[keel.EarlyStopping(monitor="loss")]).train()
    state_file = tmp_path / "ck" / "step-00000002" / "callbacks.json"
    key = "EarlyStopping{'monitor': 'loss', 'mode': 'min'}"
    assert json.loads(state_file.read_text())["callbacks"][key]["wait"] == 0
    for text, why in (("[1]", "expected"), ("{", "not JSON"),
                      (json.dumps({"format": "keel.callbacks/1", "callbacks": {key: {"best": 1.0, "wait": -4,
                                                                                    "stopped_step": None}}}), "wait"),
                      (json.dumps({"format": "keel.callbacks/1", "callbacks": {key: {"best": "low", "wait": 0,
                                                                                    "stopped_step": None}}}), "best"),
                      (" " * (2 << 20), "bytes")):
        state_file.write_text(text)
        with pytest.raises(keel.Error, match=why) as refused:
            keel.Trainer(cfg, resume=tmp_path / "ck", callbacks=[keel.EarlyStopping(monitor="loss")])
        assert str(state_file) in str(refused.value)
    state_file.unlink()  # none at all (a `keel run` checkpoint): the callbacks start fresh
    fresh = keel.EarlyStopping(monitor="loss")
    keel.Trainer(cfg, resume=tmp_path / "ck", callbacks=[fresh])
    assert (fresh.best, fresh.wait) == (math.inf, 0)


class CountSteps(keel.Callback):
    """A state that changes every step, so callbacks.json shows which step's state it holds."""

    def __init__(self):
        self.seen = 0

    def on_step_end(self, trainer, metrics):
        self.seen += 1

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


def test_callbacks_json_is_written_beside_asynchronous_checkpoints(config, tmp_path):
    """train.checkpoint.async publishes a checkpoint folder after the step that saved it: every
    one still gets callbacks.json, holding the state after its own step's hooks (the step number
    in the folder's name), equal to what a synchronous run writes there, and a resume from it
    restores that state."""
    def run(name, asynchronous):
        cfg = with_train(config, steps=8, log_every=1, metrics_path=str(tmp_path / f"{name}.jsonl"),
                         checkpoint={"dir": str(tmp_path / name), "every": 2, "keep": 8, "async": asynchronous})
        keel.Trainer(cfg, callbacks=[CountSteps(), keel.EarlyStopping(monitor="loss", patience=8)]).train()
        return cfg

    run("sync", False)
    asynchronous = run("async", True)
    for step in (2, 4, 6, 8):
        folder = f"step-{step:08d}"
        saved = json.loads((tmp_path / "async" / folder / "callbacks.json").read_text())
        assert saved["callbacks"]["CountSteps"] == {"seen": step}, folder
        assert saved == json.loads((tmp_path / "sync" / folder / "callbacks.json").read_text()), folder
    counter = CountSteps()
    keel.Trainer(asynchronous, resume=tmp_path / "async" / "step-00000004", callbacks=[counter])
    assert counter.seen == 4
