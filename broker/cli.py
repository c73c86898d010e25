"""The ``broker`` command line: serve, check, plugins, journal tools.

User-facing errors (a bad config, a port in use, a missing directory) print as one message per problem,
without a traceback, and exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from broker import __version__
from broker.config.model import LoggingConfig
from broker.errors import BrokerError, ConfigError, ConfigIssue
from broker.registry import TRANSIENT

log = logging.getLogger("broker")


def _setup_logging(level: str, config_logging: LoggingConfig | None = None) -> None:
    """stderr at ``level``; once the config is loaded, its ``<Logging>`` targets instead (if it has any)."""
    if config_logging is not None and config_logging.targets:
        from broker.logfiles import configure_logging

        try:
            configure_logging(config_logging, level)
        except OSError as exc:
            raise BrokerError(f"cannot open the log file of <Logging><Target>: {exc}") from None
        return
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _load(path: str, *, check_files: bool = False):  # noqa: ANN202 - returns Config
    from broker.config import load_config

    if not Path(path).exists():
        raise ConfigError(f"{path}: no such configuration file")
    return load_config(path, check_files=check_files)


def _issue_text(issue: ConfigIssue) -> str:
    """``file:line: /element/path: message``, without the severity (the caller labels it)."""
    where = f"{issue.file}:{issue.line}" if issue.line else issue.file
    text = f"{issue.path}: {issue.message}" if issue.path else issue.message
    return f"{where}: {text}" if where else text


def _report(issues: Sequence[ConfigIssue], *, tail: str = "") -> None:
    """Print errors then warnings, each labelled with its severity, and count each kind apart."""
    errors = [i for i in issues if i.severity != "warning"]
    warnings = [i for i in issues if i.severity == "warning"]
    for issue in (*errors, *warnings):
        print(f"{'warning' if issue.severity == 'warning' else 'error'}: {_issue_text(issue)}", file=sys.stderr)
    print(f"{len(errors)} error(s), {len(warnings)} warning(s){tail}.", file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    """Validate a config and print a summary (or every problem)."""
    from broker.plugin_config import resolve_plugins
    from broker.plugins import build_plugin_manager

    config = _load(args.config, check_files=True)  # also every file and folder it names
    base = Path(args.config).resolve().parent
    plugins = build_plugin_manager([(m.name, m.library, m.options) for m in config.modules], base_dir=base)
    try:
        resolved = resolve_plugins(config, plugins)  # raises ConfigError naming file:line of every problem
    except ConfigError as exc:  # the config's own warnings still count
        raise ConfigError([*exc.issues, *config.warnings]) from None
    for w in (*config.warnings, *resolved.warnings):
        print(f"warning: {_issue_text(w)}", file=sys.stderr)
    if args.dump:
        print(config.expanded_xml)
        return 0
    print(f"{args.config}: OK — instance {config.name!r}")
    security = resolved.security
    for t in config.transports:
        print(f"  transport {t.name}: {t.type} {t.host}:{t.port} protocol {t.protocol}"
              f"{' message type ' + t.message_type if t.message_type else ''}")
        if security is not None and t.name in security.transports:
            auth, ent = security.transports[t.name]
            print(f"    authentication {auth.name}, entitlement {ent.name}"
                  f"{', TLS' + (' with client certificates' if t.tls.verify_client else '') if t.tls else ''}")
    if config.admin:
        admin_auth = security.admin.name if security is not None and security.admin is not None else "none"
        scheme = "https" if config.admin.certificate else "http"
        print(f"  admin: {scheme}://{config.admin.host}:{config.admin.port}/ (authentication {admin_auth})")
    for s in config.sow_topics:
        storage = s.storage_engine + (f" {s.file_name}" if s.file_name else "")
        keys = ",".join(s.keys) or "(user-supplied SowKey)"
        print(f"  sow topic {s.name}: {s.message_type}, key {keys}, {storage}")
    if config.transaction_log:
        tl = config.transaction_log
        print(f"  transaction log: {tl.journal_directory} ({', '.join(t.name for t in tl.topics)})")
    for a in config.actions:
        print(f"  action: on {', '.join(o.module for o in a.on)} do {', '.join(d.module for d in a.do)}")
    print(f"  {len(config.warnings) + len(resolved.warnings)} warning(s)")
    return 0


def _compiled_summary() -> str:
    """Which hot-path modules run compiled, for the ready line (see broker/speedups)."""
    from broker import speedups

    if speedups.pure_python():
        return f"pure Python: {speedups.PURE_PYTHON_ENV} is set"
    chosen = speedups.loaded()
    compiled = ", ".join(sorted(name for name, on in chosen.items() if on)) or "none"
    missing = ", ".join(sorted(name for name, on in chosen.items() if not on))
    return f"compiled: {compiled}" + (f"; not built, pure Python: {missing}" if missing else "")


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the broker until SIGTERM, SIGINT or SIGHUP (unless an action binds SIGHUP), or until an action
    asks for a shutdown. Either way the on-shutdown actions run first and the exit code is 0."""
    import trio

    from broker.server.gctuning import tune_garbage_collector
    from broker.server.gilswitch import tune_switch_interval
    from broker.server.kernel import open_broker
    from broker.server.pauses import install_from_environment, uninstall

    config = _load(args.config)
    _setup_logging(args.log_level, config.logging)
    for w in config.warnings:
        log.warning("%s", _issue_text(w))

    async def main() -> None:
        pauses = install_from_environment()  # BROKER_PAUSE_LOG_MS: who holds the event loop (latency tails)
        tune_switch_interval()  # the loop gets the GIL back from query threads within 1 ms
        # Opened before the broker serves, so an amps-action-on-signal bound to SIGHUP (whose receiver
        # opens later, inside) takes SIGHUP over while it runs, as an explicit AMPS action does.
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as watching:
                # open_broker recovers in a thread while the Admin port answers; leaving it drains the clients
                # (at most <ShutdownTimeout>), then closes the journal and the stores.
                async with open_broker(config) as broker:
                    tune_garbage_collector()  # what the configuration, plugins and SOW topics built is frozen
                    log.info("broker %s ready (instance %s; %s)", __version__, config.name, _compiled_summary())
                    reason = await _wait_for_stop(signals, broker)
                    log.info("%s, shutting down: draining clients (at most %gs; a second signal stops waiting)",
                             reason, config.shutdown_timeout)
                    # Watches through the on-shutdown actions and the drain (which open_broker shields).
                    watching.start_soon(_hurry_on_signal, signals, broker)
                    await broker.shutdown_actions()
                watching.cancel_scope.cancel()
        uninstall(pauses)
        log.info("broker stopped")

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        raise _single_broker_error(group) from None
    return 0


#: Signals that stop the broker cleanly (SIGHUP only where it exists, and not while an action binds it).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


async def _wait_for_stop(signals: AsyncIterator[int], broker: Any) -> str:
    """Wait for a stop signal or ``broker.stop_requested``; returns why, for the log."""
    import trio

    why: list[str] = []
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            async for signum in signals:
                why.append(f"received {signal.Signals(signum).name}")
                break
            nursery.cancel_scope.cancel()

        async def on_request() -> None:
            await broker.stop_requested.wait()
            why.append(f"shutdown requested ({broker.stop_reason})")
            nursery.cancel_scope.cancel()

        nursery.start_soon(on_signal)
        nursery.start_soon(on_request)
    return why[0]


async def _hurry_on_signal(signals: AsyncIterator[int], broker: Any) -> None:
    """A second stop signal while the broker shuts down: stop waiting for the on-shutdown actions and the
    clients (an operator pressing Ctrl-C twice)."""
    async for signum in signals:
        log.warning("received %s again: not waiting for the on-shutdown actions or the clients",
                    signal.Signals(signum).name)
        broker.hurry()
        return


def _single_broker_error(group: BaseExceptionGroup) -> BaseException:
    """The user-facing error inside a task group's failure (a port in use, a bad plugin...), if any."""
    matched, _rest = group.split(BrokerError)
    if matched is None:
        return group
    leaf: BaseException = matched
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def cmd_plugins(args: argparse.Namespace) -> int:
    """List installed plugins and what they register; with a config, what each SOW topic will use."""
    from broker.plugin_config import Resolved, resolve_plugins
    from broker.plugins import build_plugin_manager

    def show(kind: str, chosen: Resolved, suffix: str = "") -> None:
        """One line per choice, then the options it receives: as given, else the declared defaults."""
        print(f"    {kind}: {chosen.name} (plugin {chosen.registration.plugin}){suffix}")
        given = dict(chosen.options)
        for option in chosen.registration.options or ():
            if option.name in given:
                print(f"      {option.name} = {given.pop(option.name)}")
            elif option.default is not None:  # written as the XML would write it
                default = str(option.default).lower() if isinstance(option.default, bool) else option.default
                print(f"      {option.name} = {default} (default)")
        for name, value in given.items():  # not declared: passed through as given
            print(f"      {name} = {value}")

    config = _load(args.config) if args.config else None
    modules = [(m.name, m.library, m.options) for m in config.modules] if config else []
    pm = build_plugin_manager(modules, base_dir=Path(args.config).resolve().parent if config else None)
    resolved = resolve_plugins(config, pm) if config else None  # a bad choice or option: errors, exit 2
    print("plugins:")
    for name, source in pm.plugins():
        print(f"  {name:24} {source}")
    for registry in pm.registries():
        print(f"{registry.kind}s:")
        for reg in registry:
            desc = f" — {reg.description}" if reg.description else ""
            print(f"  {reg.name:24} from {reg.plugin}{desc}")
            if reg.options is not None and reg.options.names():
                print(f"  {'':24} options: {', '.join(reg.options.names())}")
    if config is None or resolved is None or not config.sow_topics:
        return 0
    print("sow topics:")
    for topic in config.sow_topics:
        chosen = resolved.topics[topic.name]
        print(f"  {topic.name}")
        in_files = TRANSIENT not in chosen.storage.registration.capabilities
        show("storage engine", chosen.storage, f" at {topic.file_name}" if topic.file_name and in_files else "")
        if chosen.key_generator is None:
            print("    key generator: none (publishers send the SowKey)")
        else:
            show("key generator", chosen.key_generator)
        if topic.history is not None:
            where = (f" in {chosen.storage.name} at {topic.file_name}.history"
                     if topic.file_name and in_files else f" in {chosen.storage.name}")
            print(f"    history: Window {_interval(topic.history.window)}, Granularity "
                  f"{_interval(topic.history.granularity)}{where}")
    return 0


def _interval(seconds: float) -> str:
    """``604800.0`` -> ``7d``, ``60.0`` -> ``1m``, ``0.5`` -> ``0.5s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def cmd_journal(args: argparse.Namespace) -> int:
    """Journal tools: dump, grep, verify and repair."""
    from broker.txlog import cli as journal_cli

    if args.journal_command == "dump":
        journal_cli.dump(args.paths, topic=args.topic, start=args.start, end=args.end, fmt=args.format)
    elif args.journal_command == "grep":
        journal_cli.grep(args.filter, args.paths, topic=args.topic, fmt=args.format)
    elif args.journal_command == "verify":
        return journal_cli.verify(args.paths)
    else:
        return journal_cli.repair(args.file)
    return 0


def cmd_install_js_client(args: argparse.Namespace) -> int:
    """Install the AMPS JavaScript client (npm ``amps``, pinned) for the web console's query panel."""
    from broker.admin import jsclient

    target = Path(args.dir) if args.dir else jsclient.PACKAGE_VENDOR
    where = jsclient.install(target)
    print(f"amps {jsclient.AMPS_JS_VERSION} installed in {where} (licence: {where / 'LICENSE'})")
    if args.dir:
        print(f"serve it to the console with {jsclient.ENV}={target}")
    return 0


def cmd_passwd(args: argparse.Namespace) -> int:
    """Add a user to a password file or change its password (``--delete`` removes it).

    The password is read from standard input when that is not a terminal (its first line), else asked twice
    without echo. It is never printed or logged.
    """
    from broker.security.passwords import PasswordFileError, remove_user, set_password

    if args.delete:
        if not remove_user(args.file, args.user):
            print(f"{args.file}: no user {args.user!r}", file=sys.stderr)
            return 1
        print(f"{args.file}: removed {args.user}")
        return 0
    if sys.stdin.isatty():
        import getpass

        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            print("error: the two passwords differ; nothing was written", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups is not None else None
    try:
        Path(args.file).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create the folder of {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        added = set_password(args.file, args.user, password, groups)
    except PasswordFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.file}: {'added' if added else 'changed the password of'} {args.user}")
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    """Write a test CA with server, admin and client certificates (``broker.security.testca``)."""
    try:
        from broker.security.testca import make_test_pki
    except ImportError as exc:  # pragma: no cover - cryptography is a dependency
        raise BrokerError(f"broker certs needs the cryptography package ({exc}): pip install cryptography") from None
    pki = make_test_pki(args.dir, hosts=args.host, days=args.days, force=args.force)
    print(f"{pki.directory}: a test CA and certificates valid for {args.days} days "
          f"(server and admin names: {', '.join(pki.hosts)})")
    for path in pki.files:
        print(f"  {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the CLI)."""
    parser = argparse.ArgumentParser(prog="broker", description="An AMPS-protocol message broker.")
    parser.add_argument("--version", action="version", version=f"broker {__version__}")
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error (default info)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the broker")
    p.add_argument("config")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("check", help="validate a config and print a summary")
    p.add_argument("config")
    p.add_argument("--dump", action="store_true", help="print the fully expanded config")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("plugins", help="list installed plugins")
    p.add_argument("config", nargs="?", help="also load the config's <Modules>")
    p.set_defaults(func=cmd_plugins)
    p = sub.add_parser("install-js-client", help="install the AMPS JavaScript client (npm amps) that the web "
                       "console's query panel runs, from the npm registry")
    p.add_argument("dir", nargs="?", help="install there instead of inside the package (then set BROKER_AMPS_JS)")
    p.set_defaults(func=cmd_install_js_client)
    p = sub.add_parser("passwd", help="add a user to a password file or change its password (stdin when piped)")
    p.add_argument("file", help="the password file (created mode 0600 if missing)")
    p.add_argument("user")
    p.add_argument("--groups", help="comma-separated groups for the entitlement file (replaces the user's)")
    p.add_argument("--delete", action="store_true", help="remove the user instead")
    p.set_defaults(func=cmd_passwd)
    p = sub.add_parser("certs", help="make a test CA and server, admin and client certificates (for trying TLS)",
                       description="Write a throw-away CA (ca.crt, ca.key, and ca.d/ for <CAPath>) and the "
                       "certificates and keys it signs: server.crt/.key for tcps transports, admin.crt/.key for "
                       "the Admin port's HTTPS, client.crt/.key for <VerifyClient>. The server and admin "
                       "certificates name localhost, 127.0.0.1 and ::1. For tests and trials, not production.")
    p.add_argument("dir", help="the folder to write (created if missing)")
    p.add_argument("--host", action="append", default=[], metavar="NAME",
                   help="another host name or IP address for the server and admin certificates (repeatable)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--force", action="store_true", help="replace certificates and keys already in DIR")
    p.set_defaults(func=cmd_certs)
    p = sub.add_parser("journal", help="read, verify and repair transaction log journals")
    jsub = p.add_subparsers(dest="journal_command", required=True)
    for name in ("dump", "grep"):
        j = jsub.add_parser(name, help=f"{name} journal records")
        if name == "grep":
            j.add_argument("filter", help="an AMPS content filter, e.g. \"/qty > 10\"")
        j.add_argument("paths", nargs="+", help="journal files or directories (live, archived, compressed)")
        j.add_argument("--topic")
        if name == "dump":
            j.add_argument("--start", help="a bookmark or timestamp (YYYYmmddTHHMMSS[Z])")
            j.add_argument("--end", help="a bookmark or timestamp")
        j.add_argument("--format", choices=("jsonl", "table"), default="jsonl")
        j.set_defaults(func=cmd_journal)
    j = jsub.add_parser("verify", help="check every record of journal files; exit 1 on damage")
    j.add_argument("paths", nargs="+", help="journal files or directories (live, archived, compressed)")
    j.set_defaults(func=cmd_journal)
    j = jsub.add_parser("repair", help="move a journal file's damaged bytes to side files, keeping every valid record")
    j.add_argument("file", help="a plain journal file (the broker using its directory must be stopped)")
    j.set_defaults(func=cmd_journal)
    from broker.spark.cli import add_parser as add_spark_parser  # no pyspark import until a job runs

    add_spark_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``broker`` command."""
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        return args.func(args)
    except ConfigError as exc:
        _report(exc.issues, tail="; nothing was started" if args.command == "serve" else "")
        return 2
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``broker journal dump ... | head``): stop quietly, as a command killed by
        # SIGPIPE would, and point stdout at /dev/null so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
