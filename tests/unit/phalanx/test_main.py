"""The operator process's pure parts (phalanx/main.py): its logging (probe access lines at DEBUG,
per-object lines quiet unless --verbose) and the `phalanx operator` arguments it reads. Nothing
here starts an operator."""

from __future__ import annotations

import logging

import pytest

from phalanx import constants, main
from phalanx.cli import build_parser

LOGGERS = (main.PROBE_ACCESS_LOGGER, "kopf.objects")


@pytest.fixture
def restored_loggers():
    """configure_logging changes process-wide loggers: each test gets them back as they were."""
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).filters)) for name in LOGGERS}
    yield
    for name, (level, filters) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.filters[:] = filters


@pytest.mark.parametrize("verbose, objects_level", [(False, logging.WARNING), (True, logging.NOTSET)])
def test_per_object_lines_are_quiet_unless_verbose(restored_loggers, verbose, objects_level):
    logging.getLogger("kopf.objects").setLevel(logging.NOTSET)
    main.configure_logging(verbose)
    assert logging.getLogger("kopf.objects").level == objects_level


@pytest.mark.parametrize("logger_level, shown", [(logging.INFO, False), (logging.DEBUG, True)])
def test_a_probe_access_line_is_a_debug_line(restored_loggers, logger_level, shown):
    main.configure_logging(verbose=False)
    access = logging.getLogger(main.PROBE_ACCESS_LOGGER)
    access.setLevel(logger_level)
    record = access.makeRecord(access.name, logging.INFO, __file__, 1, "GET /healthz 200", (), None)
    assert access.filter(record) is shown
    assert (record.levelno, record.levelname) == (logging.DEBUG, "DEBUG")


def test_the_operators_defaults_are_the_constants():
    args = build_parser().parse_args(["operator"])
    assert (args.namespace, args.all_namespaces, args.config, args.kubeconfig) == ([], False, None, None)
    assert (args.liveness_port, args.metrics_port) == (constants.DEFAULT_LIVENESS_PORT, constants.DEFAULT_OPERATOR_METRICS_PORT)
    assert args.shutdown_grace == constants.SHUTDOWN_GRACE_SECONDS and not args.leader_elect
    assert args.fn.__name__ == "cmd_operator"
