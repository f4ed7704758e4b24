from __future__ import annotations

from phalanx_common.termination import write_message

REPORT = b'{"phase": "Failed", "error": {"type": "E", "rank": 1}}'


def test_written_only_where_the_file_is(tmp_path):
    assert write_message(b"{}", str(tmp_path / "absent"), keep=lambda *_: False) is False
    assert not (tmp_path / "absent").exists()


def test_keep_decides_on_the_report_there(tmp_path):
    path = tmp_path / "termination-log"
    path.write_bytes(REPORT)
    seen = []
    assert write_message(b'{"step": 1}', str(path), keep=lambda report, rank: seen.append((report, rank)) or True) is False
    assert seen == [(True, 1)] and path.read_bytes() == REPORT
    assert write_message(b'{"step": 1}', str(path), keep=lambda report, rank: False) is True
    assert path.read_bytes() == b'{"step": 1}'
    assert write_message(b'{"step": 2}', str(path), keep=lambda report, rank: report) is True  # no report there
    assert path.read_bytes() == b'{"step": 2}'
