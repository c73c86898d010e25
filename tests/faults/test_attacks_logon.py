"""Issue 34: logon defences, revocation and TLS handshakes, attacked over real TCP with the official client,
raw AMPS frames, real HTTP for the Admin port and real TLS handshakes.

* wrong passwords for one user from an address do not lock another user out of that address;
* a user deleted with ``broker passwd --delete`` is refused at once after the reset (SIGHUP action or the Admin
  reset endpoint), on the transport and on the Admin port (no credential cache outlives the reset);
* the third refused logon on a connection still gets its failure ack before the close;
* Admin basic authentication is limited after repeated failures (per user and address);
* a storm of TLS handshakes leaves a logged-on TLS client working, and stalled handshakes from one address are
  bounded (the extra connections are closed at once).
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from broker.security.passwords import set_password
from broker.security.tls import HANDSHAKES_PER_ADDRESS
from broker.testing.process import BrokerProcess, free_port
from broker.testing.tls import make_ca

pytestmark = pytest.mark.timeout(120)

USERS = {"alice": "alice-pw", "reader": "reader-pw", "eu": "eu-pw", "admin": "admin-pw", "ops": "ops-pw"}
SECURE = """
<Authentication><Module>password-file</Module><Options><PasswordFile>users.passwd</PasswordFile></Options>
</Authentication>
"""
ON_SIGHUP = """<Actions><Action>
  <On><Module>amps-action-on-signal</Module><Options><Signal>SIGHUP</Signal></Options></On>
  <Do><Module>amps-action-do-reset-authentication</Module></Do>
</Action></Actions>"""


def write_users(directory: Path) -> Path:
    path = directory / "users.passwd"
    for user, password in USERS.items():
        set_password(path, user, password)
    return path


def uri(proc: BrokerProcess, user: str, password: str) -> str:
    return f"tcp://{user}:{password}@127.0.0.1:{proc.port}/amps/json"


def logon(proc: BrokerProcess, user: str, password: str, name: str) -> bool:
    """Whether the official client logs on as ``user`` with ``password`` (a refusal: ``False``)."""
    client = AMPS.Client(name)
    try:
        client.connect(uri(proc, user, password))
        client.logon(10000)
        return True
    except AMPS.AuthenticationException:
        return False
    finally:
        client.close()


def admin_get(proc: BrokerProcess, path: str, user: str, password: str) -> int:
    """The status of a GET of ``path`` on the Admin port with basic credentials."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(f"http://127.0.0.1:{proc.admin_port}{path}",
                                     headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("attacks")
    write_users(directory)
    proc = BrokerProcess.from_xml(directory, admin=True, extra=SECURE).start()
    yield proc
    proc.stop()


def test_wrong_passwords_for_one_user_do_not_lock_out_another_from_the_same_address(broker) -> None:
    for i in range(100):
        assert not logon(broker, "eu", f"guess-{i}", f"guesser-{i}")
    # The guessed user is held back now, even with the right password (exponential backoff)...
    assert not logon(broker, "eu", USERS["eu"], "eu-owner"), broker.log()[-3000:]
    # ...but another user at the same address logs on as usual.
    assert logon(broker, "reader", USERS["reader"], "bystander")
    assert "too many refused logons for this user from 127.0.0.1" in broker.log()


def frame(header: dict) -> bytes:
    payload = json.dumps(header).encode()
    return struct.pack(">I", len(payload)) + payload


def read_frame(sock: socket.socket) -> dict | None:
    """The next frame's header, or ``None`` when the connection ended."""
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = sock.recv(n - len(data))
            except ConnectionError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    size = exactly(4)
    if size is None:
        return None
    body = exactly(struct.unpack(">I", size)[0])
    if body is None:
        return None
    return json.loads(body[:body.rindex(b"}") + 1])


def test_the_third_refused_logon_in_a_row_still_gets_its_failure_ack(broker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        for attempt in (1, 2, 3):
            sock.sendall(frame({"c": "logon", "cid": f"try-{attempt}", "client_name": "raw-guesser",
                                "user_id": "alice", "pw": f"wrong-{attempt}", "a": "processed"}))
            ack = read_frame(sock)
            assert ack is not None, f"refused logon {attempt} got a bare close instead of its failure ack"
            assert ack.get("cid") == f"try-{attempt}" and ack.get("status") == "failure", ack
            assert ack.get("reason") == "authentication failure", ack
        assert read_frame(sock) is None  # and then the connection is closed


def test_admin_basic_auth_is_limited_after_repeated_failures(broker) -> None:
    refused = 0
    started = time.monotonic()
    while time.monotonic() - started < 3.0:  # past the first short block, into a longer one
        assert admin_get(broker, "/amps/instance.json", "ops", "guess") == 401
        refused += 1
        time.sleep(0.1)
    # The guessed user is held back, even with the right password...
    assert admin_get(broker, "/amps/instance.json", "ops", USERS["ops"]) == 401
    assert "too many refused requests for this user from 127.0.0.1" in broker.log()
    # ...another user at the same address is not.
    assert admin_get(broker, "/amps/instance.json", "admin", USERS["admin"]) == 200


@pytest.mark.parametrize("reset", ["sighup", "admin"])
def test_a_deleted_user_is_refused_at_once_after_the_reset(tmp_path: Path, reset: str) -> None:
    passwd = write_users(tmp_path)
    with BrokerProcess.from_xml(tmp_path, admin=True, extra=SECURE + ON_SIGHUP) as proc:
        assert logon(proc, "reader", USERS["reader"], "reader-before")
        assert admin_get(proc, "/amps/instance.json", "reader", USERS["reader"]) == 200  # now remembered
        # Live connections across the reset: the deleted user's is closed, the other user's carries on.
        lost = threading.Event()
        live_reader, live_alice = AMPS.Client("reader-live"), AMPS.Client("alice-live")
        live_reader.set_disconnect_handler(lambda client: lost.set())
        for client, user in ((live_reader, "reader"), (live_alice, "alice")):
            client.connect(uri(proc, user, USERS[user]))
            client.logon(10000)

        subprocess.run([sys.executable, "-m", "broker", "passwd", str(passwd), "reader", "--delete"],
                       check=True, capture_output=True)
        if reset == "sighup":
            proc.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 15
            while "authentication reloaded" not in proc.log():
                assert time.monotonic() < deadline, "the SIGHUP reset did not happen"
                time.sleep(0.05)
        else:
            assert admin_get(proc, "/amps/administrator/authorization/authentication/reset", "admin",
                             USERS["admin"]) == 200

        assert admin_get(proc, "/amps/instance.json", "reader", USERS["reader"]) == 401
        assert not logon(proc, "reader", USERS["reader"], "reader-after")
        assert admin_get(proc, "/amps/instance.json", "alice", USERS["alice"]) == 200
        assert lost.wait(10), "the deleted user's live connection was kept"
        assert "reader-live" in proc.log() and "its user was removed from the authentication files" in proc.log()
        live_alice.publish("after-reset", json.dumps({"id": 1}))
        live_alice.flush(10000)  # still logged on: the reset kept the user it still knows
        live_alice.close()
        live_reader.close()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("tls-storm")
    ca = make_ca(directory, "attacks-storm-ca")  # a name of its own: AMPS.ssl_init keeps one context per process
    certificate, key = ca.issue("server", server=True)
    tls_port = free_port()
    extra = f"""<Transports><Transport><Name>secure</Name><Type>tcps</Type>
      <InetAddr>127.0.0.1:{tls_port}</InetAddr><Protocol>amps</Protocol>
      <Certificate>{certificate}</Certificate><PrivateKey>{key}</PrivateKey><LogonTimeout>60s</LogonTimeout>
    </Transport></Transports>"""
    proc = BrokerProcess.from_xml(directory, extra=extra).start()
    proc.tls_port = tls_port  # type: ignore[attr-defined]
    proc.ca = ca.cert_path  # type: ignore[attr-defined]
    yield proc
    proc.stop()


def open_stalled(port: int, source: str, count: int) -> list[socket.socket]:
    """``count`` TCP connections from ``source`` to the TLS port that never send their ClientHello."""
    stalled: list[socket.socket] = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        stalled.append(sock)
    return stalled


def still_open(stalled: list[socket.socket], expected: int) -> int:
    """How many of ``stalled`` the broker keeps open, once it closed all but ``expected`` (or 15 s passed)."""
    deadline = time.monotonic() + 15
    while True:
        count = 0
        for sock in stalled:
            try:
                count += sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                count += 1  # open, waiting for its ClientHello
            except ConnectionError:
                pass
        if count <= expected or time.monotonic() > deadline:
            return count
        time.sleep(0.1)


def test_a_handshake_storm_leaves_a_tls_client_working_and_is_bounded_per_address(tls_broker) -> None:
    AMPS.ssl_init()
    client_context = AMPS.ssl_get_context()
    client_context.load_verify_locations(str(tls_broker.ca))
    AMPS.ssl_set_verify(True)
    received: list[str] = []
    bystander = AMPS.Client("tls-bystander")
    bystander.connect(f"tcps://127.0.0.1:{tls_broker.tls_port}/amps/json")
    bystander.logon(10000)
    bystander.subscribe(lambda m: received.append(m.get_data()), "ticks", timeout=10000)

    stop = threading.Event()
    done = [0]
    failed = [0]

    def storm(source: str) -> None:
        context = ssl.create_default_context(cafile=str(tls_broker.ca))
        while not stop.is_set():
            try:
                with socket.socket() as raw:
                    raw.bind((source, 0))
                    raw.settimeout(10)
                    raw.connect(("127.0.0.1", tls_broker.tls_port))
                    with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                        done[0] += 1
            except (ssl.SSLError, OSError):
                failed[0] += 1

    threads = [threading.Thread(target=storm, args=(f"127.0.0.{2 + i % 2}",), daemon=True) for i in range(12)]
    for thread in threads:
        thread.start()
    stalled: list[socket.socket] = []
    try:
        # Handshakes that stall, from one address: only HANDSHAKES_PER_ADDRESS stay, the rest are closed at once.
        stalled = open_stalled(tls_broker.tls_port, "127.0.0.4", HANDSHAKES_PER_ADDRESS + 6)
        assert still_open(stalled, HANDSHAKES_PER_ADDRESS) == HANDSHAKES_PER_ADDRESS
        for i in range(40):
            bystander.publish("ticks", json.dumps({"i": i}))
            bystander.publish_flush(10000)
            time.sleep(0.05)
        # The stalled ones do not hold up another address's handshake.
        with socket.create_connection(("127.0.0.1", tls_broker.tls_port), timeout=10) as raw, \
                ssl.create_default_context(cafile=str(tls_broker.ca)).wrap_socket(raw, server_hostname="127.0.0.1"):
            pass
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + 10
    while len(received) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    bystander.close()
    assert [json.loads(d)["i"] for d in received] == list(range(40))
    assert done[0] > 20, f"only {done[0]} storm handshakes completed ({failed[0]} failed)"
    assert "session from" not in tls_broker.log() and "Traceback" not in tls_broker.log()


def test_the_handshake_runs_in_the_handshake_threads(tmp_path: Path) -> None:
    """The broker's handshake drives trio's SSLStream with its CPU steps in the pool (not trio's on-loop path)."""
    import trio
    import trio.testing

    from broker.security import tls

    ca = make_ca(tmp_path)
    certificate, key = ca.issue("server", server=True)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certificate, key)
    threads: set[str] = set()
    original = tls._step

    def step(ssl_object: ssl.SSLObject) -> bool:
        threads.add(threading.current_thread().name)
        return original(ssl_object)

    async def main() -> None:
        left, right = trio.testing.memory_stream_pair()
        server = trio.SSLStream(left, server_context, server_side=True)
        client = trio.SSLStream(right, ssl.create_default_context(cafile=str(ca.cert_path)),
                                server_hostname="localhost")
        async with trio.open_nursery() as nursery:
            async def serve() -> None:
                assert await tls.handshake(server, "127.0.0.1:1", "t", 10)
                assert await server.receive_some(100) == b"ping"
                await server.send_all(b"pong")

            nursery.start_soon(serve)
            await client.do_handshake()
            await client.send_all(b"ping")
            assert await client.receive_some(100) == b"pong"

    tls._step = step
    try:
        trio.run(main)
    finally:
        tls._step = original
    assert threads and all(name.startswith("broker-tls") for name in threads), threads
