"""Subscriber processes for the workloads that need concurrent receivers (W3 and W5).

Each function runs in a child process (multiprocessing, spawn) and talks to the parent through a
pipe: ``("ready", info)`` once subscribed, then ``("done", results)``, or ``("error", text)``. Separate
processes keep the receivers' Python work off the publisher's interpreter lock.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

#: Every Nth delivery is kept as a latency sample (bounded memory for large runs).
SAMPLE_EVERY = 1


def amps_fanout(uri: str, topic: str, clients: int, expected: int, timeout: float, conn: Any) -> None:
    """``clients`` connections each subscribed to ``topic``; done when each got ``expected`` messages."""
    from bench.ampsclient import close, connect
    from bench.messages import TS_SLICE

    opened: list[Any] = []
    step, t_step = "starting", time.monotonic()
    try:
        all_done = threading.Event()
        state = {"finished": 0}
        lock = threading.Lock()
        counts = [0] * clients
        latencies: list[list[int]] = [[] for _ in range(clients)]
        last_ns = [0] * clients

        def handler_for(i: int) -> Any:
            lat = latencies[i]

            def on_message(m: Any) -> None:
                now = time.time_ns()
                lat.append(now - int(m.get_data()[TS_SLICE]))
                counts[i] += 1
                if counts[i] == expected:
                    last_ns[i] = now
                    with lock:
                        state["finished"] += 1
                        if state["finished"] == clients:
                            all_done.set()
            return on_message

        for i in range(clients):
            step = f"connecting subscriber {i}"
            t_step = time.monotonic()
            c = connect(uri, "fanout-sub")
            opened.append(c)
            step = f"subscribing {c.get_name()} (logged on in {time.monotonic() - t_step:.2f}s)"
            t_step = time.monotonic()
            c.subscribe(handler_for(i), topic, timeout=10_000)
        conn.send(("ready", clients))
        cpu0 = time.process_time()
        all_done.wait(timeout)
        cpu_s = time.process_time() - cpu0  # this subscriber process's CPU: whether it is the limit
        conn.send(("done", {"counts": counts, "last_ns": last_ns, "cpu_s": cpu_s,
                            "latencies": [x for lat in latencies for x in lat]}))
    except Exception:  # noqa: BLE001 - reported to the parent, which records the error
        # Which step failed and after how long: a refused subscribe, a timeout or a closed connection.
        conn.send(("error", f"while {step}, after {time.monotonic() - t_step:.2f}s:\n"
                            + traceback.format_exc()[-1500:]))
    finally:
        for c in opened:
            close(c)


def node_fanout(uri: str, topic: str, clients: int, expected: int, timeout: float, amps_js: str,
                conn: Any) -> None:
    """:func:`amps_fanout` over WebSocket: the npm ``amps`` client under Node (``bench/ws_fanout.js``)."""
    import json
    import os
    import subprocess
    from pathlib import Path

    script = Path(__file__).with_name("ws_fanout.js")
    proc = subprocess.Popen(["node", str(script), uri, topic, str(clients), str(expected), str(timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "AMPS_JS": amps_js})
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ready"):
                conn.send(("ready", clients))
            elif line.startswith("{"):
                conn.send(("done", json.loads(line)))
                break
            elif line.startswith("error"):
                conn.send(("error", line.strip()))
                break
        else:
            conn.send(("error", f"node exited with {proc.wait()}: {proc.stderr.read()[-1500:] if proc.stderr else ''}"))
    except Exception:  # noqa: BLE001 - reported to the parent, which records the error
        conn.send(("error", traceback.format_exc()[-1500:]))
    finally:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def amps_oof(uri: str, topic: str, flt: str, batch_size: int, expected_updates: int, expected_oof: int,
             grace: float, timeout: float, conn: Any) -> None:
    """sow_and_subscribe with OOF; reports snapshot time, update latencies and every OOF's data."""
    import AMPS

    from bench.ampsclient import close, connect
    from bench.messages import TS_SLICE

    client = None
    try:
        snapshot_done = threading.Event()
        finished = threading.Event()
        st = {"sow": 0, "publish": 0, "t_end": 0, "other": 0}
        latencies: list[int] = []
        received: list[int] = []  # when each update arrived (the timeline of W3's latencies)
        oofs: list[str] = []

        def on_message(m: Any) -> None:
            cmd = m.get_command()
            if cmd == "publish":
                now = time.time_ns()
                latencies.append(now - int(m.get_data()[TS_SLICE]))
                received.append(now)
                st["publish"] += 1
            elif cmd == "oof":
                oofs.append(m.get_data())
            elif cmd == "sow":
                st["sow"] += 1
                return
            elif cmd == "group_end":
                st["t_end"] = time.perf_counter_ns()
                snapshot_done.set()
                return
            elif cmd == "group_begin":
                return
            else:
                st["other"] += 1
                return
            if st["publish"] >= expected_updates and len(oofs) >= expected_oof:
                finished.set()

        client = connect(uri, "oof-sub")
        cmd = (AMPS.Command("sow_and_subscribe").set_topic(topic).set_filter(flt)
               .set_batch_size(batch_size).set_options("oof"))
        t0 = time.perf_counter_ns()
        client.execute_async(cmd, on_message)
        if not snapshot_done.wait(timeout):
            raise TimeoutError(f"no group_end after {timeout}s ({st['sow']} records)")
        conn.send(("ready", {"snapshot_records": st["sow"], "snapshot_s": (st["t_end"] - t0) / 1e9}))
        finished.wait(timeout)
        time.sleep(grace)  # anything arriving now would be a duplicate or a stray OOF
        conn.send(("done", {"publishes": st["publish"], "latencies": latencies, "received": received, "oofs": oofs,
                            "other": st["other"]}))
    except Exception:  # noqa: BLE001 - reported to the parent
        conn.send(("error", traceback.format_exc()[-1500:]))
    finally:
        if client is not None:
            close(client)


def nats_fanout(port: int, subject: str, clients: int, expected: int, timeout: float, conn: Any) -> None:
    """``clients`` nats-py connections subscribed to ``subject`` (NATS core, no JetStream)."""
    import asyncio
    import contextlib

    from bench.messages import TS_SLICE
    from bench.peertools import nats_connect

    async def main() -> dict[str, Any]:
        counts = [0] * clients
        last_ns = [0] * clients
        latencies: list[int] = []
        done = asyncio.Event()
        finished = [0]
        ncs = []

        def cb_for(i: int) -> Any:
            async def cb(msg: Any) -> None:
                now = time.time_ns()
                latencies.append(now - int(msg.data[TS_SLICE]))
                counts[i] += 1
                if counts[i] == expected:
                    last_ns[i] = now
                    finished[0] += 1
                    if finished[0] == clients:
                        done.set()
            return cb

        try:
            for i in range(clients):
                nc = await nats_connect(port)
                ncs.append(nc)
                await nc.subscribe(subject, cb=cb_for(i), pending_msgs_limit=-1, pending_bytes_limit=-1)
                await nc.flush()
            conn.send(("ready", clients))
            cpu0 = time.process_time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout)
            return {"counts": counts, "last_ns": last_ns, "latencies": latencies, "cpu_s": time.process_time() - cpu0}
        finally:
            for nc in ncs:
                await nc.close()

    try:
        conn.send(("done", asyncio.run(main())))
    except Exception:  # noqa: BLE001 - reported to the parent
        conn.send(("error", traceback.format_exc()[-1500:]))


class Children:
    """Child processes running a worker function, with their pipes; all are reaped on exit.

    Args:
        target: A function of this module.
        args_list: One argument tuple per child (the pipe is appended).
    """

    def __init__(self, target: Any, args_list: list[tuple[Any, ...]]) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.pipes = []
        self.procs = []
        for args in args_list:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=target, args=(*args, child), daemon=True)
            p.start()
            child.close()
            self.pipes.append(parent)
            self.procs.append(p)

    def collect(self, tag: str, timeout: float) -> list[Any]:
        """The next message of each child, which must be ``tag``.

        Raises:
            RuntimeError: a child reported an error, exited, or said nothing in time.
        """
        out = []
        deadline = time.monotonic() + timeout
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            while not pipe.poll(0.1):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a subscriber process sent no {tag!r} within {timeout:.0f}s")
                if not proc.is_alive() and not pipe.poll(0):
                    raise RuntimeError(f"a subscriber process exited (code {proc.exitcode}) before {tag!r}")
            kind, payload = pipe.recv()
            if kind == "error":
                raise RuntimeError(f"subscriber process failed:\n{payload}")
            if kind != tag:
                raise RuntimeError(f"subscriber process sent {kind!r}, expected {tag!r}")
            out.append(payload)
        return out

    def close(self) -> None:
        """Wait briefly for the children, then terminate the rest."""
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
        for pipe in self.pipes:
            pipe.close()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
