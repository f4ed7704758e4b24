// Added to sigs.k8s.io/kube-network-policies by Phalanx's hack/kind/netpol.sh (not upstream).
//
// kube-network-policies sends the first packet of each connection to userspace with nftables'
// `queue` expression. A kernel built without CONFIG_NFT_QUEUE and without loadable modules (the
// VM of Phalanx's kind route) rejects that rule: "netlink receive: no such file or directory".
// xtables' NFQUEUE target, which nftables runs through nft_compat (what `iptables-nft -j
// NFQUEUE` installs), sends packets to the same queue: used when the probe below fails.

package networkpolicy

import (
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"k8s.io/klog/v2"
)

// nftQueueSupported adds a rule with a queue expression to a hook-less chain of a scratch table
// (nothing passes through it) and removes the table again.
var nftQueueSupported = sync.OnceValue(func() bool {
	nft, err := nftables.New()
	if err != nil {
		return true // the caller reports the error of its own connection
	}
	table := &nftables.Table{Name: "kube-network-policies-probe", Family: nftables.TableFamilyINet}
	nft.AddTable(table)
	chain := nft.AddChain(&nftables.Chain{Name: "probe", Table: table})
	nft.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Queue{Num: 0}}})
	err = nft.Flush()
	nft.DelTable(table)
	_ = nft.Flush()
	if err != nil {
		klog.Infof("nftables queue expression refused (%v): using the xtables NFQUEUE target (nft_compat)", err)
		return false
	}
	return true
})

// nfqueueVerdict queues to queue num, bypassing it (accept) when nothing listens if bypass.
func nfqueueVerdict(num int, bypass bool) expr.Any {
	if nftQueueSupported() {
		q := &expr.Queue{Num: uint16(num)}
		if bypass {
			q.Flag = expr.QueueFlagBypass
		}
		return q
	}
	var flags uint16
	if bypass {
		flags = 0x01 // NFQ_FLAG_BYPASS
	}
	// struct xt_NFQ_info_v3 {__u16 queuenum; __u16 queues_total; __u16 flags;}, padded to 8 bytes
	info := make(xt.Unknown, 8)
	copy(info[0:], binaryutil.NativeEndian.PutUint16(uint16(num)))
	copy(info[2:], binaryutil.NativeEndian.PutUint16(1))
	copy(info[4:], binaryutil.NativeEndian.PutUint16(flags))
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}
