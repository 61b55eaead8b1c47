"""A TensorFlow input pipeline as tf.data users write it, feeding a small
Keras CNN in a custom training loop that times its own waits for data
(perf_counter around next(), the MLPerf Storage definition).

    tfdata_train.py DATA_DIR OUT_JSON [--parallel N] [--compute S] [--steps N]
                    [--compute-kind model|sleep] [--fit]
                    [--model cnn|tiny] [--profile DIR]
                    [--steps-per-execution N]
    tfdata_train.py DATA_DIR --make N       # N JPEG images in 4 TFRecord shards

Pipeline: TFRecordDataset over the shards (parallel reads), parse, JPEG
decode and random crop in `map(num_parallel_calls=N)`, batch, prefetch.
tf.data runs all of it on its own native threads (no Python on them) and
hands each batch to the Python thread that calls next(). Ground truth in
OUT_JSON: per step the wait and its span on CLOCK_MONOTONIC, the loop's
window, its thread id and pid.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def make(d: Path, n: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    writers = [tf.io.TFRecordWriter(str(d / f"shard-{k}.tfrecord")) for k in range(4)]
    for i in range(n):
        base = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        img = tf.image.resize(base, (192, 256), method="bicubic")
        jpg = tf.io.encode_jpeg(tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), quality=90)
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpg.numpy()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))}))
        writers[i % 4].write(ex.SerializeToString())
    for w in writers:
        w.close()


def parse(rec):
    f = tf.io.parse_single_example(rec, {"image": tf.io.FixedLenFeature([], tf.string),
                                         "label": tf.io.FixedLenFeature([], tf.int64)})
    img = tf.io.decode_jpeg(f["image"], channels=3)
    img = tf.image.random_crop(img, (96, 96, 3))
    return tf.cast(img, tf.float32) / 255.0, f["label"]


def fit(a, ds, model, opt, loss_fn) -> None:
    """model.fit: Keras runs each step (its next() on the dataset and the
    model's step) in one TensorFlow function; the Python thread waits for it
    whole. A callback times each step."""
    model.compile(optimizer=opt, loss=loss_fn, steps_per_execution=a.steps_per_execution)
    steps = []

    class StepClock(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.t = (time.perf_counter(), time.monotonic_ns())

        def on_train_batch_end(self, batch, logs=None):
            steps.append((self.t, (time.perf_counter(), time.monotonic_ns())))

    start = time.perf_counter()
    if a.profile:
        t_prof = time.monotonic_ns()
        tf.profiler.experimental.start(a.profile)
    model.fit(ds, steps_per_epoch=a.steps, epochs=1, callbacks=[StepClock()], verbose=0)
    if a.profile:
        tf.profiler.experimental.stop()
    window = time.perf_counter() - start
    truth = {"tid": threading.get_native_id(), "pid": os.getpid(), "steps": len(steps),
             "step_s": [e[0] - b[0] for b, e in steps], "loop_window_s": window,
             "step_spans_ns": [(b[1], e[1]) for b, e in steps]}
    if a.profile:
        truth.update(get_next_spans(a.profile))
        # the profiler's times count from its start: about (within the start
        # call) CLOCK_MONOTONIC's t_prof
        truth["profiler_start_ns"] = t_prof
        # TensorFlow's input time over the steps' time; and over the window
        # iotrace judges, from the first next() (the first step's tracing
        # and compiling of the function come before it) to the last step's end
        truth["au_steps"] = 1 - sum(truth["get_next_s"]) / sum(truth["step_s"])
        first = t_prof + truth["get_next_spans_ns"][0][0]
        truth["loop_window_s"] = (truth["step_spans_ns"][-1][1] - first) / 1e9
        truth["au"] = 1 - sum(truth["get_next_s"]) / truth["loop_window_s"]
    Path(a.out).write_text(json.dumps(truth))


# the op of a step's next(): IteratorGetNextAsOptional where Keras runs several
# steps in one function call (steps_per_execution > 1)
GET_NEXT_OPS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")


def get_next_spans(logdir: str) -> dict:
    """TensorFlow's own measure of a step's input time: its profiler's
    IteratorGetNext op (`IteratorGetNextOp::DoCompute` on the host), each
    span in ns from the profiler's start."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    path = next(Path(logdir).rglob("*.xplane.pb"))
    xs = xplane_pb2.XSpace()
    xs.ParseFromString(path.read_bytes())
    spans = []
    for plane in xs.planes:
        ids = {k for k, m in plane.event_metadata.items() if m.name in GET_NEXT_OPS}
        for line in plane.lines:
            for ev in line.events:
                if ev.metadata_id in ids:
                    s = line.timestamp_ns + ev.offset_ps // 1000
                    spans.append((s, s + ev.duration_ps // 1000))
    spans.sort()
    return {"get_next_spans_ns": spans, "get_next_s": [(e - s) / 1e9 for s, e in spans]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--make", type=int)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--compute", type=float, default=0.05)
    ap.add_argument("--compute-kind", choices=("model", "sleep"), default="model")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--model", choices=("cnn", "tiny"), default="cnn",
                    help="a small CNN, or a linear layer on the mean colour (no compute to speak of)")
    ap.add_argument("--steps-per-execution", type=int, default=1,
                    help="model.fit's steps in one TensorFlow function call")
    ap.add_argument("--profile", help="TensorFlow's profiler around model.fit, into this directory")
    ap.add_argument("--fit", action="store_true",
                    help="train with model.fit; the steps timed by a Keras callback")
    a = ap.parse_args()
    if a.make:
        make(Path(a.data), a.make)
        return
    tf.config.threading.set_intra_op_parallelism_threads(1)
    files = sorted(str(p) for p in Path(a.data).glob("*.tfrecord"))
    ds = (tf.data.TFRecordDataset(files, num_parallel_reads=a.parallel)
          .map(parse, num_parallel_calls=a.parallel).repeat().batch(a.batch).prefetch(2))
    model = tf.keras.Sequential([
        tf.keras.layers.Input((96, 96, 3)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(16, 3, activation="relu"), tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10)]) if a.model == "cnn" else tf.keras.Sequential([
        tf.keras.layers.Input((96, 96, 3)), tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10)])
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss

    if a.fit:
        return fit(a, ds, model, opt, loss_fn)
    it = iter(ds)
    waits, spans = [], []       # the first step too: its wait starts the pipeline
    start = time.perf_counter()
    for _ in range(a.steps):
        t, t_ns = time.perf_counter(), time.monotonic_ns()
        x, y = next(it)
        waits.append(time.perf_counter() - t)
        spans.append((t_ns, time.monotonic_ns()))
        if a.compute_kind == "sleep":
            time.sleep(a.compute)
        else:
            step(x, y).numpy()
    window = time.perf_counter() - start
    Path(a.out).write_text(json.dumps({
        "tid": threading.get_native_id(), "pid": os.getpid(), "steps": len(waits),
        "wait_s": waits, "loop_window_s": window, "au": 1 - sum(waits) / window,
        "wait_spans_ns": spans}))


if __name__ == "__main__":
    main()
