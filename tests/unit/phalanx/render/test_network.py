import pytest

from phalanx.api.config import NetworkProfile
from phalanx.api.types import TrainingJobSpec
from phalanx.render.network import apply_network, host_ports, render_network

WATCHDOG = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "PHALANX_PG_TIMEOUT_SECONDS": "600"}


def spec(**network):
    return TrainingJobSpec(image="x", model={"preset": "debug"}, network=network)


def test_infiniband_field_by_field():
    p = NetworkProfile(fabric="infiniband", hcas=["mlx5_0:1", "mlx5_1"], socket_ifname="=eth0", cross_nic=0,
                       ib_timeout=22, ib_retry_cnt=7, rdma_resource="rdma/rdma_shared_device_a", rdma_count=2,
                       multus_networks="ib-sriov", ipc_lock=True, shm_size="64Gi",
                       topo_file={"path": "/opt/microsoft/ndv5-topo.xml", "hostPath": "/opt/microsoft/ndv5-topo.xml"})
    w = render_network(spec(), p)
    assert w.env_dict() == {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1", "NCCL_IB_TIMEOUT": "22",
                            "NCCL_IB_RETRY_CNT": "7", "NCCL_CROSS_NIC": "0",
                            "NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml", **WATCHDOG}
    assert w.resources == {"rdma/rdma_shared_device_a": 2}
    assert w.annotations == {"k8s.v1.cni.cncf.io/networks": "ib-sriov"}
    assert w.capabilities_add == ["IPC_LOCK"]
    assert w.volumes == [{"name": "nccl-topo", "hostPath": {"path": "/opt/microsoft/ndv5-topo.xml", "type": "File"}}]
    assert w.volume_mounts == [{"name": "nccl-topo", "mountPath": "/opt/microsoft/ndv5-topo.xml", "readOnly": True}]
    assert not w.host_network and w.dns_policy is None and w.shm_size == "64Gi"
    assert w.master_port == 29500 and w.warnings == []


def test_roce_gid_index_and_configmap_topo():
    p = NetworkProfile(fabric="roce", hcas=["=mlx5_2:1"], gid_index=3,
                       topo_file={"path": "/etc/nccl/topo.xml", "configMap": "nccl-topo"})
    w = render_network(spec(), p)
    env = w.env_dict()
    assert env["NCCL_IB_HCA"] == "=mlx5_2:1" and env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_CROSS_NIC" not in env and "NCCL_IB_TIMEOUT" not in env
    assert w.volumes == [{"name": "nccl-topo", "configMap": {"name": "nccl-topo", "items": [{"key": "topo.xml", "path": "topo.xml"}]}}]
    assert w.volume_mounts == [{"name": "nccl-topo", "mountPath": "/etc/nccl/topo.xml", "subPath": "topo.xml", "readOnly": True}]


def test_efa_defaults_resource_and_no_ib_vars():
    w = render_network(spec(), NetworkProfile(fabric="efa", rdma_count=4, hcas=["mlx5_0"]))
    assert w.resources == {"vpc.amazonaws.com/efa": 4}
    assert w.env_dict() == WATCHDOG  # no FI_PROVIDER unless the profile needs it
    assert "ignored" in w.warnings[0]
    old = render_network(spec(), NetworkProfile(fabric="efa", env={"FI_PROVIDER": "efa"}))
    assert old.env_dict()["FI_PROVIDER"] == "efa"


def test_gpudirect_tcpx():
    p = NetworkProfile(fabric="gpudirect-tcpx", socket_ifname="eth0", tcpx_socket_ifname="eth1,eth2,eth3,eth4",
                       tcpx_ctrl_dev="eth0", gid_index=None)
    env = render_network(spec(), p).env_dict()
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4",
                   "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0", **WATCHDOG}


def test_ethernet_minimal_and_no_debug_vars_by_default():
    w = render_network(spec(), NetworkProfile())
    assert w.env_dict() == WATCHDOG
    assert not any(k in w.env_dict() for k in ("NCCL_DEBUG", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_ALGO", "NCCL_PROTO"))
    assert w.resources == {} and w.annotations == {} and w.capabilities_add == [] and w.volumes == []


def test_watchdog_settings():
    p = NetworkProfile(watchdog={"asyncErrorHandling": 1, "enableMonitoring": False, "heartbeatTimeoutSeconds": 60,
                                 "dumpOnTimeout": True, "pgTimeoutSeconds": 1800})
    env = render_network(spec(), p).env_dict()
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and env["TORCH_NCCL_ENABLE_MONITORING"] == "0"
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "60" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["PHALANX_PG_TIMEOUT_SECONDS"] == "1800"


def test_job_overrides_win_and_warn():
    p = NetworkProfile(fabric="infiniband", hcas=["mlx5_0"])
    w = render_network(spec(ncclEnv={"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_1", "NCCL_P2P_LEVEL": "NVL"}), p)
    env = w.env_dict()
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_IB_HCA"] == "mlx5_1" and env["NCCL_P2P_LEVEL"] == "NVL"
    assert any("NCCL_P2P_LEVEL" in x for x in w.warnings)
    assert any("no '=' prefix" in x for x in w.warnings)


def test_host_network_needs_profile_permission():
    w = render_network(spec(hostNetwork=True), NetworkProfile(), job_key="ns/a")
    assert not w.host_network  # refused by validate_network (tests/unit/phalanx/test_validate.py)


def test_host_network_ports_are_per_job_and_stable():
    p = NetworkProfile(allow_host_network=True)
    a = render_network(spec(hostNetwork=True), p, job_key="ns/a")
    b = render_network(spec(hostNetwork=True), p, job_key="ns/b")
    assert a.host_network and a.dns_policy == "ClusterFirstWithHostNet"
    assert (a.master_port, a.progress_port, a.metrics_port) == host_ports("ns/a")
    assert a.master_port != b.master_port
    assert render_network(spec(hostNetwork=True), p, job_key="ns/a").master_port == a.master_port
    lo, hi = 20000, 29999
    ports = {host_ports(f"ns/j{i}")[0] for i in range(500)}
    assert all(lo <= x <= hi - 2 and (x - lo) % 3 == 0 for x in ports) and len(ports) > 400
    with pytest.raises(ValueError):
        host_ports("x", (10, 11))


def base_pod():
    return {"metadata": {"name": "p", "annotations": {"k8s.v1.cni.cncf.io/networks": "default/a"}},
            "spec": {"containers": [
                {"name": "sidecar"},
                {"name": "trainer", "env": [{"name": "MASTER_PORT", "value": "29500"},
                                            {"name": "PET_RDZV_ENDPOINT", "value": "job-0.job:29500"},
                                            {"name": "NCCL_SOCKET_IFNAME", "value": "user-choice"}],
                 "ports": [{"name": "rendezvous", "containerPort": 29500}, {"name": "progress", "containerPort": 29600},
                           {"name": "metrics", "containerPort": 29601}],
                 "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}]}}


def test_apply_network_merges():
    p = NetworkProfile(fabric="roce", socket_ifname="eth0", rdma_resource="rdma/roce", multus_networks="default/b",
                       ipc_lock=True, allow_host_network=True, shm_size="32Gi",
                       topo_file={"path": "/t/topo.xml", "hostPath": "/h/topo.xml"})
    w = render_network(spec(hostNetwork=True), p, job_key="ns/j")
    pod = base_pod()
    out = apply_network(pod, w)
    assert pod == base_pod()  # input untouched
    c = out["spec"]["containers"][1]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "user-choice"  # the pod's own env wins
    assert env["MASTER_PORT"] == str(w.master_port) and env["PET_RDZV_ENDPOINT"] == f"job-0.job:{w.master_port}"
    assert [x["containerPort"] for x in c["ports"]] == [w.master_port, w.progress_port, w.metrics_port]
    assert c["resources"] == {"requests": {"rdma/roce": 1}, "limits": {"rdma/roce": 1}}
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert out["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "default/a,default/b"
    assert [v["name"] for v in out["spec"]["volumes"]] == ["dshm", "nccl-topo"]
    assert out["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "2Gi"  # existing shm kept
    assert {"name": "nccl-topo", "mountPath": "/t/topo.xml", "readOnly": True} in c["volumeMounts"]
    assert out["spec"]["hostNetwork"] is True and out["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "env" not in out["spec"]["containers"][0]
    # Idempotent.
    assert apply_network(out, w) == out


def test_apply_network_adds_shm_and_trainer():
    w = render_network(spec(), NetworkProfile(shm_size="16Gi", ipc_lock=True))
    out = apply_network({"spec": {}}, w)
    c = out["spec"]["containers"][0]
    assert c["name"] == "trainer"
    assert out["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    assert c["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert "hostNetwork" not in out["spec"]
