"""``python -m replywire health`` and ``services``: an operator's probes of a running
producer over its standard gRPC services (``grpc.health.v1.Health``, server reflection),
with the stubs grpcio-health-checking and grpcio-reflection ship: no ``.proto`` file and no
``grpcurl`` needed.

``health`` prints the status one line (``SERVING``, ``NOT_SERVING``, ``SERVICE_UNKNOWN``);
with ``--watch``, one line per status the producer announces, until it ends the watch.
``services`` prints the services reflection lists, one a line. Exit codes: 0 serving (or
listed), 1 an answer other than ``SERVING``, 2 a usage error, 5 no answer (nothing
listening, not a gRPC server, a TLS mismatch, no answer within ``--timeout-s``)."""

from __future__ import annotations

import argparse
import sys
from typing import Final, TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from replywire.consumer.security import SecurityFlags, load_tls
from replywire.consumer.targets import check_target
from replywire.shared.errors import ConfigurationError
from replywire.shared.status import EXIT_USAGE
from replywire.shared.terminal_text import MAX_LINE_CHARS, shown_line

EXIT_SERVING: Final = 0
EXIT_NOT_SERVING: Final = 1
EXIT_NO_ANSWER: Final = 5


def complain(message: str) -> None:
    print(f"replywire: {shown_line(message, MAX_LINE_CHARS)}", file=sys.stderr)


def open_channel(args: argparse.Namespace) -> grpc.Channel:
    """A channel to ``--target``: TLS as the consumer's flags say it (``--tls``,
    ``--tls-ca``, a client certificate for mutual TLS, ``--tls-server-name``), else
    plaintext. No token: the producer's health and reflection answer without one."""
    check_target(args.target)
    flags = SecurityFlags(
        tls=args.tls, tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key,
        tls_server_name=args.tls_server_name,
    )  # fmt: skip
    security = load_tls(flags)
    credentials = security.credentials(args.target)
    if credentials is None:
        return grpc.insecure_channel(args.target)
    return grpc.secure_channel(args.target, credentials, options=security.channel_options())


def no_answer(error: grpc.RpcError, target: str) -> int:
    """One line for a call that got no answer; exit 5."""
    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    name = code.name if code is not None else "error"
    complain(f"no answer from {target}: {name}: {' '.join(details.split())}")
    return EXIT_NO_ANSWER


def said(status: int, out: TextIO) -> int:
    """The status on its line; the exit code it means."""
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    print(name, file=out, flush=True)
    serving = status == health_pb2.HealthCheckResponse.SERVING
    return EXIT_SERVING if serving else EXIT_NOT_SERVING


def run_health(args: argparse.Namespace, out: TextIO) -> int:
    """``Check`` once, or ``Watch`` until the producer ends it (or Ctrl-C): the exit code
    is the last status's."""
    with open_channel(args) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=args.service)
        if not args.watch:
            try:
                answer = stub.Check(request, timeout=args.timeout_s)
            except grpc.RpcError as error:
                if isinstance(error, grpc.Call) and error.code() is grpc.StatusCode.NOT_FOUND:
                    return said(health_pb2.HealthCheckResponse.SERVICE_UNKNOWN, out)
                return no_answer(error, args.target)
            return said(answer.status, out)
        code: int | None = None
        try:
            for answer in stub.Watch(request):
                code = said(answer.status, out)
        except grpc.RpcError as error:  # the producer stopped (the watch's usual end)
            if code is None:
                return no_answer(error, args.target)
        except KeyboardInterrupt:
            pass
        return EXIT_NOT_SERVING if code is None else code


def run_services(args: argparse.Namespace, out: TextIO) -> int:
    """The services reflection lists, sorted, one a line."""
    with open_channel(args) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        asked = reflection_pb2.ServerReflectionRequest(list_services="")
        try:
            answers = list(stub.ServerReflectionInfo(iter([asked]), timeout=args.timeout_s))
        except grpc.RpcError as error:
            return no_answer(error, args.target)
    names = sorted(
        service.name for answer in answers for service in answer.list_services_response.service
    )
    for name in names:
        print(name, file=out)
    return EXIT_SERVING


def run_probe(args: argparse.Namespace, out: TextIO) -> int:
    try:
        return run_health(args, out) if args.command == "health" else run_services(args, out)
    except ConfigurationError as error:
        complain(str(error))
        return EXIT_USAGE
