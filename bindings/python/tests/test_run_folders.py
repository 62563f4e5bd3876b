"""Run folders and resuming, as a user of Lightning or HF's Trainer expects them: a dict config
without output paths gets runs/run/version_N and never overwrites an earlier run; resume="latest"
continues the newest run exactly; save() saves where the run does; Ctrl-C (a KeyboardInterrupt)
saves the step it stopped after when train.checkpoint.on_interrupt asks."""
import json
import os

import pytest

import keel


def unpathed(config):
    """The small config without any output path, every step logged."""
    train = {k: v for k, v in config["train"].items() if k not in ("metrics_path", "tensorboard_dir", "checkpoint")}
    return dict(config, train=dict(train, log_every=1))


def records(path):
    return [json.loads(line) for line in open(path)]


def test_each_run_of_a_pathless_dict_gets_its_own_version_folder(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = unpathed(config)
    first = keel.Trainer(cfg)
    first.train(2)
    second = keel.Trainer(cfg)
    second.train(3)
    assert sorted(os.listdir("runs/run")) == ["version_0", "version_1"]
    assert [r["step"] for r in records("runs/run/version_0/metrics.jsonl")] == [1, 2]  # not truncated
    assert [r["step"] for r in records("runs/run/version_1/metrics.jsonl")] == [1, 2, 3]
    # Two trainers built before either trains (a sweep) still get folders of their own.
    third, fourth = keel.Trainer(cfg), keel.Trainer(cfg)
    third.train(1)
    fourth.train(1)
    assert [r["step"] for r in records("runs/run/version_2/metrics.jsonl")] == [1]
    assert [r["step"] for r in records("runs/run/version_3/metrics.jsonl")] == [1]
    # A config that names an output path keeps it, as `keel run` would.
    named = dict(cfg, train=dict(cfg["train"], metrics_path=str(tmp_path / "mine.jsonl")))
    keel.Trainer(named).train(1)
    assert (tmp_path / "mine.jsonl").exists()
    assert sorted(n for n in os.listdir("runs/run") if n.startswith("version_")) == [f"version_{i}" for i in range(4)]


def test_resume_latest_continues_the_newest_run_exactly(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = unpathed(config)
    cfg["train"]["steps"] = 6
    cfg["train"]["checkpoint"] = {"every": 2}
    straight = keel.Trainer(cfg)  # version_0: six steps in one go
    straight.train(6)
    interrupted = keel.Trainer(cfg)  # version_1: four steps, saved at 2 and 4
    interrupted.train(4)
    del interrupted

    resumed = keel.Trainer(cfg, resume="latest")
    assert resumed.global_step == 4
    resumed.train(2)
    assert sorted(os.listdir("runs/run")) == ["version_0", "version_1"]  # no new folder
    want = {r["step"]: r["loss"] for r in records("runs/run/version_0/metrics.jsonl")}
    got = {r["step"]: r["loss"] for r in records("runs/run/version_1/metrics.jsonl")}
    assert sorted(got) == [1, 2, 3, 4, 5, 6]  # one record per step, none repeated
    assert got == want


def test_resume_takes_a_checkpoint_folder_and_refuses_when_there_is_none(config, tmp_path):
    first = keel.Trainer(config)
    first.train(3)
    first.save()  # the config's train.checkpoint.dir
    assert (tmp_path / "checkpoints" / "step-00000003").is_dir()
    assert keel.Trainer(config, resume=tmp_path / "checkpoints" / "step-00000003").global_step == 3
    assert keel.Trainer(config, resume="latest").global_step == 3

    empty = dict(config, train=dict(config["train"], checkpoint={"dir": str(tmp_path / "none-yet")}))
    with pytest.raises(keel.Error, match="none-yet"):
        keel.Trainer(empty, resume="latest")
    with pytest.raises(ValueError, match="keep goes with a root_dir"):
        first.save(keep=2)


def test_keyboard_interrupt_saves_the_step_when_asked(config, tmp_path, capfd):
    def interrupt_at_3(metrics):
        if metrics["step"] == 3:
            raise KeyboardInterrupt

    asked = dict(config, train=dict(config["train"], checkpoint={"dir": str(tmp_path / "asked"), "on_interrupt": True}))
    trainer = keel.Trainer(asked)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(10, callback=interrupt_at_3)
    assert trainer.global_step == 3
    assert (tmp_path / "asked" / "latest").read_text().strip() == "step-00000003"
    assert keel.Trainer(asked, resume="latest").global_step == 3

    # Ctrl-C itself (the signal, as the terminal sends it): every step's hooks run once, the save
    # of the step it stopped after reaches on_save, and the save is said.
    import _thread

    class Recorder(keel.Callback):
        def __init__(self):
            self.steps, self.saves = [], []

        def on_step_end(self, trainer, metrics):
            self.steps.append(metrics["step"])

        def on_save(self, trainer, path):
            self.saves.append(path)

    recorder = Recorder()
    signalled = dict(asked, train=dict(asked["train"], checkpoint={"dir": str(tmp_path / "signalled"),
                                                                   "on_interrupt": True}))
    trainer = keel.Trainer(signalled, callbacks=[recorder])
    capfd.readouterr()
    with pytest.raises(KeyboardInterrupt):
        trainer.train(10, callback=lambda m: _thread.interrupt_main() if m["step"] == 2 else None)
    stopped = trainer.global_step
    assert recorder.steps == list(range(1, stopped + 1)), (recorder.steps, stopped)
    assert recorder.saves == [str(tmp_path / "signalled" / f"step-{stopped:08d}")], recorder.saves
    said = capfd.readouterr().out
    assert f"interrupted after step {stopped}: saved {recorder.saves[0]}" in said, said[-2000:]

    silent = dict(config, train=dict(config["train"], checkpoint={"dir": str(tmp_path / "silent")}))
    with pytest.raises(KeyboardInterrupt):
        keel.Trainer(silent).train(10, callback=interrupt_at_3)
    assert not (tmp_path / "silent").exists() or not os.listdir(tmp_path / "silent")


def test_a_trainer_that_fails_to_build_leaves_no_folder_and_latest_skips_empty_ones(config, tmp_path, monkeypatch):
    """A failed Trainer gives back the version folder it claimed; resume="latest" continues the
    newest version holding a checkpoint, not an empty one a failed or concurrent start left."""
    monkeypatch.chdir(tmp_path)
    cfg = unpathed(config)
    cfg["train"]["checkpoint"] = {"every": 2}
    keel.Trainer(cfg).train(2)  # version_0, saved at step 2
    for _ in range(2):
        with pytest.raises(keel.ConfigError):
            keel.Trainer(dict(cfg, model=dict(cfg["model"], n_layr=2)))
    assert sorted(os.listdir("runs/run")) == ["version_0"], os.listdir("runs/run")
    os.makedirs("runs/run/version_1")  # claimed by a start that died before it could give it back
    resumed = keel.Trainer(cfg, resume="latest")
    assert resumed.global_step == 2
