"""Lightning-style hooks around Trainer.train: subclass keel.Callback, override the hooks you
need, and pass instances as keel.Trainer(config, callbacks=[...]). Built in: EarlyStopping on a
monitored value, and ModelCheckpoint, which keeps the checkpoint of the best value so far.

The hooks, in the order they run within one train() call:
    on_train_start(trainer)
    on_step_end(trainer, metrics)   after every step; metrics as Trainer.train's callback gets them
    on_eval(trainer, metrics)       on steps that evaluated (metrics["val_loss"])
    on_save(trainer, path)          on steps that saved a checkpoint (train.checkpoint.every)
    on_train_end(trainer)           when train() returns, early or not
    on_exception(trainer, error)    when train() raises (a KeyboardInterrupt too), before it does
A hook stops training by setting trainer.should_stop = True: the step it runs in is the last.

State across a resume, as Lightning keeps it: a callback's state_dict() is saved beside every
checkpoint of the run (CHECKPOINT/callbacks.json, keel/_callback_state.py) and handed back to
load_state_dict() by Trainer(config, resume=...), matched by state_key. EarlyStopping and
ModelCheckpoint keep their counters this way."""
import math

from keel import _callback_state


class Callback:
    """The hooks, each doing nothing; override those you need."""

    def on_train_start(self, trainer):
        pass

    def on_step_end(self, trainer, metrics):
        pass

    def on_eval(self, trainer, metrics):
        pass

    def on_save(self, trainer, path):
        pass

    def on_train_end(self, trainer):
        pass

    def on_exception(self, trainer, error):
        pass

    @property
    def state_key(self):
        """The name this callback's state is saved under: unique among a trainer's callbacks."""
        return type(self).__qualname__

    def state_dict(self):
        """What a resume needs to continue as an unbroken run would (JSON); {} keeps nothing."""
        return {}

    def load_state_dict(self, state):
        pass


class _Monitor:
    """The best value of one metric so far, where "better" is lower (mode "min") or higher ("max")
    by more than min_delta."""

    def __init__(self, monitor, mode, min_delta):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', found {mode!r}")
        if not min_delta >= 0:
            raise ValueError(f"min_delta must be >= 0, found {min_delta!r}")
        self.monitor, self.mode, self.min_delta = monitor, mode, min_delta
        self.best = math.inf if mode == "min" else -math.inf

    def value(self, metrics):
        return metrics.get(self.monitor)

    def improves(self, value):
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    @property
    def monitored_state_key(self):
        """As Lightning names them: two monitors of different metrics keep apart states."""
        return f"{type(self).__qualname__}{{'monitor': {self.monitor!r}, 'mode': {self.mode!r}}}"


class EarlyStopping(Callback, _Monitor):
    """Stops training once `monitor` (default "val_loss") has not improved by more than min_delta
    for `patience` checks in a row (0, as in Lightning and Keras: at the first check without
    improvement); a check is a step whose metrics hold the monitored value (for val_loss: an
    evaluation step, train.eval_every). stopped_step says where it stopped."""

    def __init__(self, monitor="val_loss", patience=3, min_delta=0.0, mode="min"):
        _Monitor.__init__(self, monitor, mode, min_delta)
        if not (isinstance(patience, int) and not isinstance(patience, bool) and patience >= 0):
            raise ValueError(f"patience must be an int >= 0, found {patience!r}")
        self.patience = patience
        self.wait = 0
        self.stopped_step = None

    state_key = _Monitor.monitored_state_key

    def on_step_end(self, trainer, metrics):
        value = self.value(metrics)
        if value is None:
            return
        if self.improves(value):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_step = metrics["step"]
            trainer.should_stop = True

    def state_dict(self):
        return {"best": self.best, "wait": self.wait, "stopped_step": self.stopped_step}

    def load_state_dict(self, state):
        self.best = _callback_state.checked_number(state, "best")
        self.wait = _callback_state.checked_count(state, "wait")
        self.stopped_step = _callback_state.checked_count(state, "stopped_step", optional=True)


class ModelCheckpoint(Callback, _Monitor):
    """Checkpoint-on-best: saves to `dirpath` (keeping `keep` checkpoints, the newest being the best)
    whenever `monitor` (default "val_loss") improves; best_path and best are the newest such
    checkpoint and its value."""

    def __init__(self, dirpath, monitor="val_loss", mode="min", min_delta=0.0, keep=1):
        _Monitor.__init__(self, monitor, mode, min_delta)
        self.dirpath, self.keep = dirpath, keep
        self.best_path = None

    state_key = _Monitor.monitored_state_key

    def on_step_end(self, trainer, metrics):
        value = self.value(metrics)
        if value is None or not self.improves(value):
            return
        self.best = value
        trainer.save(self.dirpath, keep=self.keep)
        self.best_path = f"{self.dirpath}/step-{metrics['step']:08d}"

    def state_dict(self):
        return {"best": self.best, "best_path": self.best_path}

    def load_state_dict(self, state):
        self.best = _callback_state.checked_number(state, "best")
        self.best_path = _callback_state.checked_path(state, "best_path")


def run_with_callbacks(trainer, train, steps, callback, callbacks):
    """Trainer.train with the hooks of `callbacks` around `train` (the extension's train)."""
    trainer.should_stop = False
    for c in callbacks:
        c.on_train_start(trainer)
    if trainer.should_stop:  # a hook stopped it before the first step
        for c in callbacks:
            c.on_train_end(trainer)
        return

    seen = {"step": None, "saved": set()}

    def hooks(metrics):
        seen["step"] = metrics["step"]
        trainer._in_hooks = True  # saves inside the hooks get the callbacks' state once all have run
        try:
            if "checkpoint" in metrics:
                trainer._checkpoints_without_callback_state.append((metrics["checkpoint"], None))
            for c in callbacks:
                c.on_step_end(trainer, metrics)
            if "val_loss" in metrics:
                for c in callbacks:
                    c.on_eval(trainer, metrics)
            if "checkpoint" in metrics and metrics["checkpoint"] not in seen["saved"]:
                seen["saved"].add(metrics["checkpoint"])
                for c in callbacks:
                    c.on_save(trainer, metrics["checkpoint"])
        finally:
            trainer._in_hooks = False
        trainer._write_callback_state()

    def on_step(metrics):
        hooks(metrics)
        stop = callback(metrics) if callback is not None else False
        return bool(stop) or trainer.should_stop

    try:
        train(steps, on_step)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            _finish_interrupted_step(trainer, callbacks, hooks, seen)
        for c in callbacks:
            c.on_exception(trainer, error)
        raise
    trainer._write_callback_state()
    for c in callbacks:
        c.on_train_end(trainer)


def _finish_interrupted_step(trainer, callbacks, hooks, seen):
    """After Ctrl-C: the step that finished as the signal came (its hooks had not run: the signal
    is seen before them) and the checkpoint train.checkpoint.on_interrupt saved of it reach the
    hooks, and the save is said, as `keel run` says it."""
    try:
        metrics = trainer.last_metrics()
    except Exception:  # nothing stepped, or the trainer is unusable: nothing to report
        return
    if metrics.get("step") != seen["step"]:
        hooks(metrics)
    elif metrics.get("checkpoint") and metrics["checkpoint"] not in seen["saved"]:
        seen["saved"].add(metrics["checkpoint"])
        for c in callbacks:
            c.on_save(trainer, metrics["checkpoint"])
    if metrics.get("checkpoint") and getattr(trainer, "verbose", False):
        print(f"interrupted after step {metrics['step']}: saved {metrics['checkpoint']}", flush=True)
