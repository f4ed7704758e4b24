"""The integration tests touch a cluster they did not start only when told it is disposable."""

import pytest

from tests.integration.conftest import foreign_cluster_refusal


@pytest.mark.parametrize(("exists", "disposable", "refused_with"), [
    (True, None, "PHALANX_CLUSTER_DISPOSABLE=1"),
    (True, "yes", "PHALANX_CLUSTER_DISPOSABLE=1"),
    (True, "1", None),
    (False, "1", "no such file"),
])
def test_foreign_cluster_refusal(tmp_path, exists, disposable, refused_with):
    kubeconfig = tmp_path / "kubeconfig"
    if exists:
        kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    refusal = foreign_cluster_refusal(str(kubeconfig), disposable)
    if refused_with is None:
        assert refusal is None
    else:
        assert refused_with in refusal and str(kubeconfig) in refusal
