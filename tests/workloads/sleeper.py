"""A thread asleep in a 100 s sleep, for the workloads that leave calls in
progress (blocked_at_end.py, asleep_at_attach.py)."""
import threading
import time


def start_sleeper() -> int:
    """Starts the thread; returns its id once it is about to sleep."""
    asleep = threading.Event()
    tid = []

    def sleeper():
        tid.append(threading.get_native_id())
        asleep.set()
        time.sleep(100)

    threading.Thread(target=sleeper, daemon=True).start()
    asleep.wait()
    return tid[0]
