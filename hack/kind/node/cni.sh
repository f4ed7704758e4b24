#!/bin/bash
# Pod networking of the offline kind node image (what kindnetd does on one L2
# network, without network policies): a ptp veth per pod with host-local IPAM on
# this node's podCIDR, and a route to every other node's podCIDR via its
# InternalIP. Level-based: re-applied every few seconds, so nodes that join
# later are routed too.
set -u
API="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
SA=/var/run/secrets/kubernetes.io/serviceaccount
CONF=/etc/cni/net.d/10-kindnet.conflist
nodes() { curl -sf --max-time 10 --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat "$SA/token")" "$API/api/v1/nodes"; }

write_conf() {
  local tmp="$CONF.tmp"
  cat >"$tmp" <<JSON
{"cniVersion": "0.4.0", "name": "kindnet", "plugins": [
  {"type": "ptp", "ipMasq": false, "mtu": 1500,
   "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
            "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "$1"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  if ! cmp -s "$tmp" "$CONF"; then mv -f "$tmp" "$CONF"; echo "wrote $CONF for $1"; else rm -f "$tmp"; fi
}

while true; do
  if all="$(nodes)"; then
    cidr="$(jq -r --arg n "$NODE_NAME" '.items[] | select(.metadata.name == $n) | .spec.podCIDR // empty' <<<"$all")"
    [[ -n "$cidr" ]] && write_conf "$cidr"
    jq -r --arg n "$NODE_NAME" '.items[] | select(.metadata.name != $n and .spec.podCIDR != null)
        | [.spec.podCIDR, (.status.addresses[] | select(.type == "InternalIP") | .address)] | @tsv' <<<"$all" |
      while read -r podcidr nodeip; do
        [[ -n "$nodeip" ]] && ip route replace "$podcidr" via "$nodeip"
      done
  else
    echo "API not reachable yet"
  fi
  sleep 5
done
