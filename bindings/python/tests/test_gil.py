"""Long calls release the GIL: a Python thread keeps counting while train() runs, and Python
plugins called from the core's thread take the GIL back without deadlocking."""
import threading
import time

import numpy as np

import keel
from conftest import unique_name


def counting_share_during(run):
    """How fast another Python thread counts while run() runs, as a fraction of how fast it
    counts while this thread sleeps (which releases the GIL).

    With the GIL held through run(), the thread can count only in the switch interval (5 ms)
    around its start and end, so a run of a few hundred milliseconds gives a share near 0;
    with the GIL released it counts throughout, slowed only by sharing the CPU with Keel."""
    stop = threading.Event()
    counted = [0]

    def count():
        while not stop.is_set():
            counted[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        before, started = counted[0], time.perf_counter()
        time.sleep(0.2)
        sleeping_rate = (counted[0] - before) / (time.perf_counter() - started)
        before, started = counted[0], time.perf_counter()
        run()
        running_rate = (counted[0] - before) / (time.perf_counter() - started)
    finally:
        stop.set()
        thread.join()
    return running_rate / sleeping_rate


def test_train_releases_the_gil(config):
    trainer = keel.Trainer(config)
    trainer.step()  # warm-up: first-step allocations
    share = counting_share_during(lambda: trainer.train(10))
    assert share > 0.1, share


def test_python_plugins_run_while_another_thread_holds_the_gil_often(config):
    data, optimizer = unique_name("threaded_data"), unique_name("threaded_sgd")

    def batches(section):
        while True:
            yield np.ones((section["micro_batch"], section["seq_len"] + 1), dtype=np.int32)

    class Sgd:
        n_state_slots, lr = 0, 0.05

        def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay):
            params -= lr * grad_scale * grads

    keel.register_data_source(data, batches)
    keel.register_optimizer(optimizer, lambda section: Sgd())
    config["data"] = {"plugin": data, "micro_batch": 4, "seq_len": 64, "val_batches": 1}
    config["optimizer"] = {"plugin": optimizer}
    trainer = keel.Trainer(config)
    steps = []
    counting_share_during(lambda: trainer.train(3, callback=lambda m: steps.append(m["step"])))
    assert steps == [1, 2, 3]
