// SPDX-License-Identifier: GPL-2.0
/*
 * ibvf: a test-only driver set for the ib-sriov real-kernel lab (scripts/kernel-lab.sh)
 * that makes the guest's igb VFs (and the VFs of its emulated NVMe PF) look like ConnectX
 * (mlx5) InfiniBand VFs to everything the plugin touches. Never part of the plugin.
 *
 * PF side (module parameter `pf`, the SR-IOV PF's PCI address): one
 * ARPHRD_INFINIBAND netdev "ibpf0" parented to the PF, so rtnetlink's
 * IFLA_VFINFO_LIST / IFLA_VF_IB_{NODE,PORT}_GUID / IFLA_VF_LINK_STATE reach the ops
 * below (do_setvfinfo() in net/core/rtnetlink.c accepts GUIDs on InfiniBand devices
 * only). Per VF it keeps what mlx5 keeps:
 *   - the "firmware" GUIDs the VF's function will come up with (initially
 *     IBVF_GUID_BASE + VF index, node = port), changed by a GUID set;
 *   - the GUIDs last set over netlink, which is all ndo_get_vf_guid reports (zero until
 *     set), as mlx5_ib_get_vf_guid() (drivers/infiniband/hw/mlx5/ib_virt.c) reports its
 *     vfs_ctx cache;
 *   - the link-state policy (auto/enable/disable).
 *
 * VF side: a PCI driver "ibvf" with no ID table, bound only through `driver_override`
 * (drivers/pci/pci-driver.c pci_match_device() matches any device whose override names
 * the driver), so the plugin's own unbind/bind through sysfs is real. Its probe reads
 * the VF's GUIDs and policy from the PF side (a GUID set takes effect only at the next
 * probe, i.e. after a rebind, as on mlx5) and registers an RDMA device "ibvf_%d"
 * (ib_alloc_device/ib_register_device, parent and DMA device the VF's pci_dev, so
 * <VF>/infiniband/ibvf_N is the kernel's own) that implements disassociate_ucontext,
 * so RDMA_NLDEV_CMD_SET with RDMA_NLDEV_NET_NS_FD really moves it
 * (ib_device_set_netns_put() in drivers/infiniband/core/device.c). The mandatory kverbs
 * are absent, so ib_core marks it a non-kverbs provider and kverbs clients (MAD, CM,
 * the real ipoib) leave it alone.
 *
 * IPoIB: like the ipoib ULP, a client of the RDMA device (ib_register_client with
 * no_kverbs_req) creates the VF's ARPHRD_INFINIBAND netdev "ib%d" in init_net when the
 * device is enabled and destroys it when the device is disabled. So, as with mlx5 +
 * ipoib, moving the RDMA device to another netns (or the kernel moving it back when
 * that netns dies) destroys the IPoIB netdev wherever it is and creates a new one in
 * the initial netns. Its 20-byte hardware address is 4 bytes flags+QPN (the QPN grows
 * with every creation, as a new UD QP's would), the fe80::/64 subnet prefix and the
 * port GUID the VF came up with.
 *
 * With the module parameter `no_refund` set (writable at run time:
 * /sys/module/ibvf/parameters/no_refund; read when an IPoIB netdev is created), the
 * IPoIB netdevs get rtnl_link_ops without netns_refund, as the real ipoib's netdevs
 * have (ipoib_link_ops in drivers/infiniband/ulp/ipoib/ipoib_netlink.c): the core then
 * destroys such a netdev with a dying netns instead of returning it to the initial one
 * (default_device_exit_net() skips it, default_device_exit_batch() deletes it, in
 * net/core/dev.c), and `ip link del` may delete it. Until the VF is rebound, its RDMA
 * device then has no IPoIB netdev, as with mlx5 + ipoib.
 *
 * Writing a VF index N to the module parameter `zero_fw_guid` (writable at run time
 * only: /sys/module/ibvf/parameters/zero_fw_guid; reads give the last index written,
 * -1 before any) makes VF N one the operator never configured: under the PF lock its
 * "firmware" node and port GUIDs and the GUIDs last set over netlink become all-zero.
 * The VF comes up with GUID zero (in its IPoIB address) at its next probe, i.e. after
 * a rebind, and ndo_get_vf_guid reports zero for it, as mlx5 does for a VF whose GUID
 * nobody assigned. A GUID set over netlink gives it a GUID again (at its next probe).
 * An index the PF has no VF for is refused with EINVAL.
 *
 * The module parameter `probe_delay_ms` (writable at run time:
 * /sys/module/ibvf/parameters/probe_delay_ms; default 0; read at each probe) makes
 * every VF probe sleep that long before it reads the VF's GUIDs and registers the RDMA
 * device, with the device lock held, as mlx5's VF probe spends ~0.2-1 s initialising
 * the function with firmware. A driver rebind then takes at least that long, which is
 * what a storm of rebinding ADDs and DELs on a real node waits for.
 *
 * Test-only pkey table (what a subnet manager programs into a VF port's P_Key table
 * through MADs, which this lab has none of): each VF's port 1 has IBVF_PKEY_TBL_LEN (4)
 * entries, kept on the PF side so that they survive a rebind as the SM's programming
 * does; entry 0 is the default partition 0xffff, the others 0x0000 (empty), at load.
 * ib_core's sysfs shows them live (<VF>/infiniband/<dev>/ports/1/pkeys/<i>,
 * show_port_pkey() calls the driver's query_pkey at every read). Writing "N I 0xKKKK"
 * to the module parameter `set_pkey` (run time only: /sys/module/ibvf/parameters/
 * set_pkey) sets VF N's entry I to 0xKKKK, as the SM would; reads give the last string
 * written. A VF index the PF has no VF for, or I >= IBVF_PKEY_TBL_LEN, is refused
 * with EINVAL.
 *
 * Up to IBVF_MAX_VFS (128) VFs per PF (the PF side keeps one state entry per VF); the
 * lab uses it on the igb PF (2 VFs) and on an emulated NVMe PF with up to 127 VFs
 * (scripts/kernel-lab.sh), one PF per load of the module.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/if_arp.h>
#include <linux/if_infiniband.h>
#include <linux/if_link.h>
#include <linux/pci.h>
#include <linux/rtnetlink.h>
#include <net/rtnetlink.h>
#include <linux/skbuff.h>
#include <linux/delay.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_pma.h>
#include <linux/version.h>

/*
 * Older kernels (the lab's LAB_KERNEL=5.10, docs/testing.md): the same driver against
 * the ib_core and PCI interfaces they have.
 * - Port numbers are u8 before 5.13 (upstream 1fb7f8973f51, "RDMA: Support more than
 *   255 rdma ports").
 * - Hw counters: alloc_hw_stats(dev, port) (port 0: the device's) before 5.14
 *   (4b5f4d3fb408, "RDMA: Split the alloc_hw_stats() ops to port and device
 *   variants"); counter names as a string array before 5.15 (13f30b0fa0a9, "RDMA/counter:
 *   Add a descriptor in struct rdma_hw_stats").
 * - pci_iov_vf_id() is 5.18's (21ca9fb62d46); before, the VF index is computed as it
 *   does, from the PF's SR-IOV capability (First VF Offset, VF Stride; PCIe base spec
 *   9.3.3.10-11), read from config space (5.10 exports neither pci_iov_virtfn_devfn()
 *   nor struct pci_sriov).
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 13, 0)
typedef u8 ibvf_port_t;
#else
typedef u32 ibvf_port_t;
#endif
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 15, 0)
#define IBVF_OLD_HW_STATS 1
#endif
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 18, 0)
static int pci_iov_vf_id(struct pci_dev *dev)
{
	struct pci_dev *pf = pci_physfn(dev);
	int pos = pci_find_ext_capability(pf, PCI_EXT_CAP_ID_SRIOV);
	u16 offset = 0, stride = 0;
	int rid;

	if (!pos)
		return -EINVAL;
	pci_read_config_word(pf, pos + PCI_SRIOV_VF_OFFSET, &offset);
	pci_read_config_word(pf, pos + PCI_SRIOV_VF_STRIDE, &stride);
	rid = ((dev->bus->number << 8) | dev->devfn) - ((pf->bus->number << 8) | pf->devfn) - offset;
	if (rid < 0 || !stride || rid % stride)
		return -EINVAL;
	return rid / stride;
}
#endif

#define IBVF_MAX_VFS 128
#define IBVF_PKEY_TBL_LEN 4
#define IBVF_GUID_BASE 0x506b4b0300a10000ULL
#define IBVF_DRV_NAME "ibvf"

static char *pf = "";
module_param(pf, charp, 0444);
MODULE_PARM_DESC(pf, "PCI address of the SR-IOV PF whose VFs this driver may bind");

static bool no_refund;
module_param(no_refund, bool, 0644);
MODULE_PARM_DESC(no_refund, "IPoIB netdevs created from now on have rtnl_link_ops without netns_refund (destroyed with their netns, deletable)");

static unsigned int probe_delay_ms;
module_param(probe_delay_ms, uint, 0644);
MODULE_PARM_DESC(probe_delay_ms, "every VF probe sleeps this long first (ms; default 0), like mlx5's VF probe");

/* ------------------------------------------------------------------ PF side */

struct ibvf_vf_state {
	u64 fw_node_guid;	/* what the VF comes up with at its next probe */
	u64 fw_port_guid;
	u64 set_node_guid;	/* last set over netlink: what ndo_get_vf_guid reports */
	u64 set_port_guid;
	int link_state;
	u16 pkeys[IBVF_PKEY_TBL_LEN];	/* port 1's P_Key table (header) */
};

struct ibvf_pf {
	struct pci_dev *pdev;
	struct mutex lock;
	struct ibvf_vf_state vf[IBVF_MAX_VFS];
};

static struct net_device *ibvf_pf_dev;
static struct ibvf_pf *ibvf_pf;
static atomic_t ibvf_qpn = ATOMIC_INIT(0x48);

static int ibvf_pf_check(int vf)
{
	if (vf < 0 || vf >= pci_num_vf(ibvf_pf->pdev) || vf >= IBVF_MAX_VFS)
		return -EINVAL;
	return 0;
}

/* zero_fw_guid: writing N zeroes VF N's firmware and netlink-set GUIDs (header). */
static int zero_fw_guid = -1;

static int ibvf_zero_fw_guid_set(const char *val, const struct kernel_param *kp)
{
	int vf, err;

	err = kstrtoint(val, 0, &vf);
	if (err)
		return err;
	if (!ibvf_pf)
		return -ENODEV;	/* at insmod, before ibvf_init(): not supported */
	err = ibvf_pf_check(vf);
	if (err)
		return err;
	mutex_lock(&ibvf_pf->lock);
	ibvf_pf->vf[vf].fw_node_guid = 0;
	ibvf_pf->vf[vf].fw_port_guid = 0;
	ibvf_pf->vf[vf].set_node_guid = 0;
	ibvf_pf->vf[vf].set_port_guid = 0;
	mutex_unlock(&ibvf_pf->lock);
	*(int *)kp->arg = vf;
	pr_info("ibvf: vf %d firmware and set GUIDs zeroed (zero GUID from its next probe)\n",
		vf);
	return 0;
}

static const struct kernel_param_ops ibvf_zero_fw_guid_ops = {
	.set = ibvf_zero_fw_guid_set,
	.get = param_get_int,
};
module_param_cb(zero_fw_guid, &ibvf_zero_fw_guid_ops, &zero_fw_guid, 0644);
MODULE_PARM_DESC(zero_fw_guid, "write a VF index N: VF N's firmware and netlink-set GUIDs become zero (it comes up with GUID zero at its next probe)");

/* set_pkey: "N I 0xKKKK" sets VF N's pkey table entry I (header). */
static char set_pkey_last[32];

static int ibvf_set_pkey_set(const char *val, const struct kernel_param *kp)
{
	int vf, idx, err;
	unsigned int key;

	if (sscanf(val, "%d %d %i", &vf, &idx, &key) != 3 || idx < 0 ||
	    idx >= IBVF_PKEY_TBL_LEN || key > 0xffff)
		return -EINVAL;
	if (!ibvf_pf)
		return -ENODEV;
	err = ibvf_pf_check(vf);
	if (err)
		return err;
	mutex_lock(&ibvf_pf->lock);
	ibvf_pf->vf[vf].pkeys[idx] = key;
	mutex_unlock(&ibvf_pf->lock);
	strscpy(set_pkey_last, val, sizeof(set_pkey_last));
	pr_info("ibvf: vf %d pkey[%d] = 0x%04x\n", vf, idx, key);
	return 0;
}

static int ibvf_set_pkey_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", set_pkey_last);
}

static const struct kernel_param_ops ibvf_set_pkey_ops = {
	.set = ibvf_set_pkey_set,
	.get = ibvf_set_pkey_get,
};
module_param_cb(set_pkey, &ibvf_set_pkey_ops, NULL, 0644);
MODULE_PARM_DESC(set_pkey, "write \"N I 0xKKKK\": VF N's port pkey table entry I becomes 0xKKKK (test-only subnet manager)");

static netdev_tx_t ibvf_xmit(struct sk_buff *skb, struct net_device *dev)
{
	dev->stats.tx_dropped++;
	dev_kfree_skb(skb);
	return NETDEV_TX_OK;
}

static int ibvf_set_vf_guid(struct net_device *dev, int vf, u64 guid, int type)
{
	int err = ibvf_pf_check(vf);

	if (err)
		return err;
	mutex_lock(&ibvf_pf->lock);
	if (type == IFLA_VF_IB_NODE_GUID) {
		ibvf_pf->vf[vf].set_node_guid = guid;
		ibvf_pf->vf[vf].fw_node_guid = guid;
	} else if (type == IFLA_VF_IB_PORT_GUID) {
		ibvf_pf->vf[vf].set_port_guid = guid;
		ibvf_pf->vf[vf].fw_port_guid = guid;
	} else {
		err = -EINVAL;
	}
	mutex_unlock(&ibvf_pf->lock);
	if (!err)
		netdev_info(dev, "vf %d %s guid %016llx\n", vf,
			    type == IFLA_VF_IB_NODE_GUID ? "node" : "port", guid);
	return err;
}

static int ibvf_get_vf_guid(struct net_device *dev, int vf,
			    struct ifla_vf_guid *node, struct ifla_vf_guid *port)
{
	int err = ibvf_pf_check(vf);

	if (err)
		return err;
	mutex_lock(&ibvf_pf->lock);
	node->vf = vf;
	node->guid = ibvf_pf->vf[vf].set_node_guid;
	port->vf = vf;
	port->guid = ibvf_pf->vf[vf].set_port_guid;
	mutex_unlock(&ibvf_pf->lock);
	return 0;
}

static int ibvf_set_vf_link_state(struct net_device *dev, int vf, int state)
{
	int err = ibvf_pf_check(vf);

	if (err)
		return err;
	if (state < IFLA_VF_LINK_STATE_AUTO || state > IFLA_VF_LINK_STATE_DISABLE)
		return -EINVAL;
	mutex_lock(&ibvf_pf->lock);
	ibvf_pf->vf[vf].link_state = state;
	mutex_unlock(&ibvf_pf->lock);
	netdev_info(dev, "vf %d link state %d\n", vf, state);
	return 0;
}

static int ibvf_get_vf_config(struct net_device *dev, int vf,
			      struct ifla_vf_info *ivi)
{
	int err = ibvf_pf_check(vf);

	if (err)
		return err;
	ivi->vf = vf;
	mutex_lock(&ibvf_pf->lock);
	ivi->linkstate = ibvf_pf->vf[vf].link_state;
	mutex_unlock(&ibvf_pf->lock);
	return 0;
}

static const struct net_device_ops ibvf_pf_ops = {
	.ndo_start_xmit = ibvf_xmit,
	.ndo_set_vf_guid = ibvf_set_vf_guid,
	.ndo_get_vf_guid = ibvf_get_vf_guid,
	.ndo_set_vf_link_state = ibvf_set_vf_link_state,
	.ndo_get_vf_config = ibvf_get_vf_config,
};

static netdev_tx_t ibvf_ipoib_xmit(struct sk_buff *skb, struct net_device *dev);

static const struct net_device_ops ibvf_ipoib_ops = {
	.ndo_start_xmit = ibvf_ipoib_xmit,
};

static void ibvf_setup_ib(struct net_device *dev)
{
	static const u8 bcast[INFINIBAND_ALEN] = {
		0x00, 0xff, 0xff, 0xff, 0xff, 0x12, 0x40, 0x1b, 0xff, 0xff,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff
	};

	dev->type = ARPHRD_INFINIBAND;
	dev->addr_len = INFINIBAND_ALEN;
	dev->hard_header_len = 0;
	dev->mtu = 2044;
	dev->min_mtu = 68;
	dev->max_mtu = 4092;
	dev->flags = IFF_BROADCAST | IFF_MULTICAST;
	dev->tx_queue_len = 0;
	memcpy(dev->broadcast, bcast, INFINIBAND_ALEN);
}

static void ibvf_pf_setup(struct net_device *dev)
{
	ibvf_setup_ib(dev);
	dev->netdev_ops = &ibvf_pf_ops;
}

static void ibvf_ipoib_setup(struct net_device *dev)
{
	ibvf_setup_ib(dev);
	dev->netdev_ops = &ibvf_ipoib_ops;
}

/* ------------------------------------------------------------------ RDMA device */

struct ibvf_dev {
	struct ib_device ibdev;		/* first: ib_alloc_device() requires it */
	struct pci_dev *pdev;
	int vf;
	u64 node_guid;
	u64 port_guid;
	int link_state;
	struct net_device *ipoib;	/* under RTNL; NULL once deleted by the core */
	atomic64_t out_of_buffer;	/* test-only hw counter, see ibvf_ipoib_xmit() */
	atomic64_t xmit_octets;		/* test-only PMA counters, see ibvf_process_mad() */
	atomic64_t xmit_packets;
};

/* The IPoIB netdev's private data: its RDMA device (valid while it is registered). */
struct ibvf_ipoib_priv {
	struct ibvf_dev *v;
};

/*
 * Test-only hw counters, so that the lab can check the exporter's RDMA counters on a
 * device that moves into a pod netns: port 1 has mlx5's basic Q counters, with the
 * names and order of basic_q_cnts[] in drivers/infiniband/hw/mlx5/counters.c (each a
 * count of packets or requests). The VF has no fabric, so every frame its IPoIB netdev
 * sends is dropped (tx_dropped); each one also counts once in out_of_buffer, which on
 * mlx5 counts packets dropped for lack of a receive WQE. The others stay 0. Served by
 * ib_core as <dev>/ports/1/hw_counters/<name> and RDMA_NLDEV_CMD_STAT_GET (nldev.c).
 */
enum { IBVF_RX_WRITE, IBVF_RX_READ, IBVF_RX_ATOMIC, IBVF_OUT_OF_BUFFER, IBVF_NUM_HW };

#ifdef IBVF_OLD_HW_STATS
static const char * const ibvf_hw_descs[IBVF_NUM_HW] = {
	[IBVF_RX_WRITE] = "rx_write_requests",
	[IBVF_RX_READ] = "rx_read_requests",
	[IBVF_RX_ATOMIC] = "rx_atomic_requests",
	[IBVF_OUT_OF_BUFFER] = "out_of_buffer",
};
#else
static const struct rdma_stat_desc ibvf_hw_descs[IBVF_NUM_HW] = {
	[IBVF_RX_WRITE] = { .name = "rx_write_requests" },
	[IBVF_RX_READ] = { .name = "rx_read_requests" },
	[IBVF_RX_ATOMIC] = { .name = "rx_atomic_requests" },
	[IBVF_OUT_OF_BUFFER] = { .name = "out_of_buffer" },
};
#endif

static netdev_tx_t ibvf_ipoib_xmit(struct sk_buff *skb, struct net_device *dev)
{
	struct ibvf_ipoib_priv *priv = netdev_priv(dev);

	atomic64_inc(&priv->v->out_of_buffer);
	atomic64_add(skb->len, &priv->v->xmit_octets);
	atomic64_inc(&priv->v->xmit_packets);
	return ibvf_xmit(skb, dev);
}

static struct ibvf_dev *to_ibvf(struct ib_device *d)
{
	return container_of(d, struct ibvf_dev, ibdev);
}

static int ibvf_query_device(struct ib_device *d, struct ib_device_attr *a,
			     struct ib_udata *uhw)
{
	struct ibvf_dev *v = to_ibvf(d);

	memset(a, 0, sizeof(*a));
	a->sys_image_guid = cpu_to_be64(v->node_guid);
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 0x101c;	/* ConnectX-6 VF */
	a->max_pkeys = IBVF_PKEY_TBL_LEN;
	return 0;
}

static int ibvf_query_port(struct ib_device *d, ibvf_port_t port, struct ib_port_attr *a)
{
	struct ibvf_dev *v = to_ibvf(d);
	bool up = v->link_state != IFLA_VF_LINK_STATE_DISABLE;

	a->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	a->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	a->max_mtu = IB_MTU_4096;
	a->active_mtu = IB_MTU_2048;
	a->gid_tbl_len = 1;
	a->pkey_tbl_len = IBVF_PKEY_TBL_LEN;
	a->lid = 0x10 + v->vf;
	a->sm_lid = 1;
	a->active_width = IB_WIDTH_4X;
	a->active_speed = IB_SPEED_HDR;
	return 0;
}

static int ibvf_port_immutable(struct ib_device *d, ibvf_port_t port,
			       struct ib_port_immutable *im)
{
	im->pkey_tbl_len = IBVF_PKEY_TBL_LEN;
	im->gid_tbl_len = 1;
	im->core_cap_flags = RDMA_CORE_CAP_PROT_IB;
	im->max_mad_size = 0;
	return 0;
}

static int ibvf_query_gid(struct ib_device *d, ibvf_port_t port, int index, union ib_gid *gid)
{
	if (index)
		return -EINVAL;
	gid->global.subnet_prefix = cpu_to_be64(0xfe80000000000000ULL);
	gid->global.interface_id = cpu_to_be64(to_ibvf(d)->port_guid);
	return 0;
}

static int ibvf_query_pkey(struct ib_device *d, ibvf_port_t port, u16 index, u16 *pkey)
{
	struct ibvf_dev *v = to_ibvf(d);

	if (index >= IBVF_PKEY_TBL_LEN || ibvf_pf_check(v->vf))
		return -EINVAL;
	mutex_lock(&ibvf_pf->lock);
	*pkey = ibvf_pf->vf[v->vf].pkeys[index];
	mutex_unlock(&ibvf_pf->lock);
	return 0;
}

static struct rdma_hw_stats *ibvf_alloc_hw_port_stats(struct ib_device *d, ibvf_port_t port)
{
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 14, 0)
	if (!port)
		return NULL;	/* no device-wide counters, only port 1's */
#endif
	return rdma_alloc_hw_stats_struct(ibvf_hw_descs, IBVF_NUM_HW,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

static int ibvf_get_hw_stats(struct ib_device *d, struct rdma_hw_stats *stats,
			     ibvf_port_t port, int index)
{
	memset(stats->value, 0, sizeof(u64) * IBVF_NUM_HW);
	stats->value[IBVF_OUT_OF_BUFFER] = atomic64_read(&to_ibvf(d)->out_of_buffer);
	return IBVF_NUM_HW;
}

/*
 * Test-only port counters, as ib_core reads them for <dev>/ports/1/counters/: a
 * Performance Management MAD (drivers/infiniband/core/sysfs.c get_perf_mad()) answered
 * like mlx5_ib_process_mad() answers it (drivers/infiniband/hw/mlx5/mad.c): ClassPortInfo
 * with IB_PMA_CLASS_CAP_EXT_WIDTH, so ib_core shows the 64-bit PortCountersExtended
 * (include/rdma/ib_pma.h struct ib_pma_portcounters_ext), where port_xmit_data counts the
 * octets sent divided by 4 (mlx5: the vport's octet counts >> 2). Every frame the IPoIB
 * netdev sends counts in port_xmit_data (its length / 4) and port_xmit_packets; the
 * receive side stays 0. PortCounters (32-bit) answers all zeros.
 */
static int ibvf_process_mad(struct ib_device *d, int flags, ibvf_port_t port,
			    const struct ib_wc *in_wc, const struct ib_grh *in_grh,
			    const struct ib_mad *in, struct ib_mad *out,
			    size_t *out_size, u16 *out_pkey_index)
{
	struct ibvf_dev *v = to_ibvf(d);
	struct ib_pma_mad *pma = (struct ib_pma_mad *)out;

	if (in->mad_hdr.mgmt_class != IB_MGMT_CLASS_PERF_MGMT ||
	    in->mad_hdr.method != IB_MGMT_METHOD_GET)
		return IB_MAD_RESULT_FAILURE;
	memset(out, 0, sizeof(*out));
	out->mad_hdr = in->mad_hdr;
	out->mad_hdr.method = IB_MGMT_METHOD_GET_RESP;
	if (in->mad_hdr.attr_id == IB_PMA_CLASS_PORT_INFO) {
		struct ib_class_port_info *cpi = (void *)pma->data;

		cpi->capability_mask = IB_PMA_CLASS_CAP_EXT_WIDTH;
	} else if (in->mad_hdr.attr_id == IB_PMA_PORT_COUNTERS_EXT) {
		struct ib_pma_portcounters_ext *pc = (void *)pma->data;

		pc->port_select = port;
		pc->port_xmit_data = cpu_to_be64(atomic64_read(&v->xmit_octets) >> 2);
		pc->port_xmit_packets = cpu_to_be64(atomic64_read(&v->xmit_packets));
		pc->port_unicast_xmit_packets = pc->port_xmit_packets;
	} else if (in->mad_hdr.attr_id != IB_PMA_PORT_COUNTERS) {
		return IB_MAD_RESULT_FAILURE;
	}
	return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
}

static void ibvf_disassociate_ucontext(struct ib_ucontext *uctx)
{
	/* No user contexts are ever created (no alloc_ucontext): nothing to do. */
}

static const struct ib_device_ops ibvf_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = 1,
	.query_device = ibvf_query_device,
	.query_port = ibvf_query_port,
	.get_port_immutable = ibvf_port_immutable,
	.query_gid = ibvf_query_gid,
	.query_pkey = ibvf_query_pkey,
	.disassociate_ucontext = ibvf_disassociate_ucontext,
	.process_mad = ibvf_process_mad,
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 14, 0)
	.alloc_hw_stats = ibvf_alloc_hw_port_stats,
#else
	.alloc_hw_port_stats = ibvf_alloc_hw_port_stats,
#endif
	.get_hw_stats = ibvf_get_hw_stats,
};

/* ------------------------------------------------------------------ IPoIB link ops */

/* Called under RTNL by `ip link del` and by default_device_exit_batch() for a dying
 * netns: the RDMA device forgets the netdev, which the core then unregisters and
 * frees (needs_free_netdev). */
static void ibvf_ipoib_dellink(struct net_device *dev, struct list_head *head)
{
	struct ibvf_ipoib_priv *p = netdev_priv(dev);

	if (p->v && p->v->ipoib == dev)
		p->v->ipoib = NULL;
	p->v = NULL;
	pr_info("ibvf: IPoIB netdev %s (ifindex %d) deleted by the core\n",
		dev->name, dev->ifindex);
	unregister_netdevice_queue(dev, head);
}

static int ibvf_ipoib_validate(struct nlattr *tb[], struct nlattr *data[],
			       struct netlink_ext_ack *extack)
{
	return -EOPNOTSUPP;	/* never created through rtnetlink */
}

static struct rtnl_link_ops ibvf_ipoib_link_ops = {
	.kind = "ibvf_ipoib",
	.priv_size = sizeof(struct ibvf_ipoib_priv),
	.setup = ibvf_ipoib_setup,
	.validate = ibvf_ipoib_validate,
	.dellink = ibvf_ipoib_dellink,
	/* .netns_refund = false, as ipoib_link_ops */
};

/* ------------------------------------------------------------------ IPoIB client */

static struct ib_client ibvf_ipoib_client;

static int ibvf_ipoib_add(struct ib_device *d)
{
	struct ibvf_dev *v;
	struct net_device *ndev;
	u8 addr[INFINIBAND_ALEN] = { 0 };
	u32 qpn;
	int err;

	if (d->ops.query_device != ibvf_query_device)
		return -EOPNOTSUPP;	/* not ours (e.g. rxe) */
	v = to_ibvf(d);
	ndev = alloc_netdev(sizeof(struct ibvf_ipoib_priv), "ib%d", NET_NAME_ENUM,
			    ibvf_ipoib_setup);
	if (!ndev)
		return -ENOMEM;
	((struct ibvf_ipoib_priv *)netdev_priv(ndev))->v = v;
	ndev->needs_free_netdev = true;
	if (READ_ONCE(no_refund))
		ndev->rtnl_link_ops = &ibvf_ipoib_link_ops;
	qpn = atomic_inc_return(&ibvf_qpn) & 0xffffff;
	addr[1] = qpn >> 16;
	addr[2] = qpn >> 8;
	addr[3] = qpn;
	put_unaligned_be64(0xfe80000000000000ULL, addr + 4);
	put_unaligned_be64(v->port_guid, addr + 12);
	dev_addr_set(ndev, addr);
	SET_NETDEV_DEV(ndev, &v->pdev->dev);
	rtnl_lock();
	err = register_netdevice(ndev);
	if (err) {
		rtnl_unlock();
		free_netdev(ndev);
		return err;
	}
	if (v->link_state == IFLA_VF_LINK_STATE_DISABLE)
		netif_carrier_off(ndev);
	else
		netif_carrier_on(ndev);
	v->ipoib = ndev;
	rtnl_unlock();
	ib_set_client_data(d, &ibvf_ipoib_client, v);
	dev_info(&v->pdev->dev, "%s: IPoIB netdev %s (ifindex %d, qpn %06x%s)\n",
		 dev_name(&d->dev), ndev->name, ndev->ifindex, qpn,
		 ndev->rtnl_link_ops ? ", no netns refund" : "");
	return 0;
}

static void ibvf_ipoib_remove(struct ib_device *d, void *data)
{
	struct ibvf_dev *v = data;
	struct net_device *ndev;

	rtnl_lock();
	ndev = v->ipoib;
	v->ipoib = NULL;
	if (ndev) {
		((struct ibvf_ipoib_priv *)netdev_priv(ndev))->v = NULL;
		dev_info(d->dev.parent, "%s: removing IPoIB netdev %s (ifindex %d)\n",
			 dev_name(&d->dev), ndev->name, ndev->ifindex);
		unregister_netdevice(ndev);	/* freed by the core: needs_free_netdev */
	} else {
		dev_info(d->dev.parent, "%s: no IPoIB netdev to remove (deleted with its netns or by hand)\n",
			 dev_name(&d->dev));
	}
	rtnl_unlock();
}

static struct ib_client ibvf_ipoib_client = {
	.name = "ibvf_ipoib",
	.add = ibvf_ipoib_add,
	.remove = ibvf_ipoib_remove,
	.no_kverbs_req = 1,
};

/* ------------------------------------------------------------------ VF PCI driver */

static int ibvf_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	unsigned int delay = READ_ONCE(probe_delay_ms);
	struct ibvf_dev *v;
	int vf, err;

	if (!pdev->is_virtfn || pci_physfn(pdev) != ibvf_pf->pdev)
		return -ENODEV;
	vf = pci_iov_vf_id(pdev);
	if (vf < 0 || vf >= IBVF_MAX_VFS)
		return -ENODEV;
	if (delay)
		msleep(delay);	/* probe_delay_ms: a slow firmware init, as mlx5's */
	v = ib_alloc_device(ibvf_dev, ibdev);
	if (!v)
		return -ENOMEM;
	v->pdev = pdev;
	v->vf = vf;
	mutex_lock(&ibvf_pf->lock);
	v->node_guid = ibvf_pf->vf[vf].fw_node_guid;
	v->port_guid = ibvf_pf->vf[vf].fw_port_guid;
	v->link_state = ibvf_pf->vf[vf].link_state;
	mutex_unlock(&ibvf_pf->lock);
	v->ibdev.node_type = RDMA_NODE_IB_CA;
	v->ibdev.phys_port_cnt = 1;
	v->ibdev.num_comp_vectors = 1;
	v->ibdev.node_guid = cpu_to_be64(v->node_guid);
	v->ibdev.dev.parent = &pdev->dev;
	ib_set_device_ops(&v->ibdev, &ibvf_ib_ops);
	err = ib_register_device(&v->ibdev, "ibvf_%d", &pdev->dev);
	if (err) {
		ib_dealloc_device(&v->ibdev);
		return err;
	}
	pci_set_drvdata(pdev, v);
	dev_info(&pdev->dev, "VF %d: RDMA device %s, node guid %016llx, port guid %016llx, link state %d\n",
		 vf, dev_name(&v->ibdev.dev), v->node_guid, v->port_guid, v->link_state);
	return 0;
}

static void ibvf_remove(struct pci_dev *pdev)
{
	struct ibvf_dev *v = pci_get_drvdata(pdev);

	ib_unregister_device(&v->ibdev);
	ib_dealloc_device(&v->ibdev);
	pci_set_drvdata(pdev, NULL);
}

static struct pci_driver ibvf_driver = {
	.name = IBVF_DRV_NAME,
	.id_table = NULL,
	.probe = ibvf_probe,
	.remove = ibvf_remove,
};

/* ------------------------------------------------------------------ module */

static int __init ibvf_init(void)
{
	unsigned int domain, bus, slot, fn;
	struct pci_dev *pdev;
	int err, i;

	if (sscanf(pf, "%x:%x:%x.%x", &domain, &bus, &slot, &fn) != 4)
		return -EINVAL;
	pdev = pci_get_domain_bus_and_slot(domain, bus, PCI_DEVFN(slot, fn));
	if (!pdev)
		return -ENODEV;
	if (!pci_num_vf(pdev)) {
		err = -ENXIO;
		goto put_pdev;
	}
	ibvf_pf = kzalloc(sizeof(*ibvf_pf), GFP_KERNEL);
	if (!ibvf_pf) {
		err = -ENOMEM;
		goto put_pdev;
	}
	ibvf_pf->pdev = pdev;
	mutex_init(&ibvf_pf->lock);
	for (i = 0; i < IBVF_MAX_VFS; i++) {
		ibvf_pf->vf[i].fw_node_guid = IBVF_GUID_BASE + i;
		ibvf_pf->vf[i].fw_port_guid = IBVF_GUID_BASE + i;
		ibvf_pf->vf[i].pkeys[0] = 0xffff;	/* the default partition */
	}
	ibvf_pf_dev = alloc_netdev(0, "ibpf0", NET_NAME_USER, ibvf_pf_setup);
	if (!ibvf_pf_dev) {
		err = -ENOMEM;
		goto free_pf;
	}
	{
		u8 addr[INFINIBAND_ALEN] = { 0, 0, 0, 0x47 };

		put_unaligned_be64(0xfe80000000000000ULL, addr + 4);
		put_unaligned_be64(IBVF_GUID_BASE - 1, addr + 12);
		dev_addr_set(ibvf_pf_dev, addr);
	}
	SET_NETDEV_DEV(ibvf_pf_dev, &pdev->dev);
	err = register_netdev(ibvf_pf_dev);
	if (err)
		goto free_netdev;
	err = rtnl_link_register(&ibvf_ipoib_link_ops);
	if (err)
		goto unregister_netdev;
	err = ib_register_client(&ibvf_ipoib_client);
	if (err)
		goto unregister_link_ops;
	err = pci_register_driver(&ibvf_driver);
	if (err)
		goto unregister_client;
	return 0;

unregister_client:
	ib_unregister_client(&ibvf_ipoib_client);
unregister_link_ops:
	rtnl_link_unregister(&ibvf_ipoib_link_ops);
unregister_netdev:
	unregister_netdev(ibvf_pf_dev);
free_netdev:
	free_netdev(ibvf_pf_dev);
free_pf:
	kfree(ibvf_pf);
put_pdev:
	pci_dev_put(pdev);
	return err;
}

static void __exit ibvf_exit(void)
{
	pci_unregister_driver(&ibvf_driver);
	ib_unregister_client(&ibvf_ipoib_client);
	rtnl_link_unregister(&ibvf_ipoib_link_ops);
	unregister_netdev(ibvf_pf_dev);
	free_netdev(ibvf_pf_dev);
	pci_dev_put(ibvf_pf->pdev);
	kfree(ibvf_pf);
}

module_init(ibvf_init);
module_exit(ibvf_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ib-sriov lab: mlx5-shaped InfiniBand VF driver, RDMA device and IPoIB netdev (test only)");
