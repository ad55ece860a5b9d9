// SPDX-License-Identifier: GPL-2.0
/*
 * vfguid: a test-only netdev for the ib-sriov real-kernel lab (scripts/kernel-lab.sh).
 *
 * Registers one ARPHRD_INFINIBAND netdev (name: module parameter `ifname`, default
 * "vfguid0") whose parent device is an existing SR-IOV PF (module parameter `pf`, a PCI
 * address such as 0000:01:00.0). With that parent, dev_num_vf(dev->dev.parent) is the
 * PF's number of enabled VFs, so rtnl_fill_vf() (net/core/rtnetlink.c) emits
 * IFLA_NUM_VF and an IFLA_VFINFO_LIST built from ndo_get_vf_config and
 * ndo_get_vf_guid, and do_setvfinfo() hands IFLA_VF_IB_NODE_GUID / IFLA_VF_IB_PORT_GUID
 * (only on ARPHRD_INFINIBAND devices) and IFLA_VF_LINK_STATE to the ops below. The
 * values are only stored and read back: the real kernel code parses the netlink
 * messages, the module shows what it received.
 */
#include <linux/err.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/if_arp.h>
#include <linux/if_infiniband.h>
#include <linux/if_link.h>
#include <linux/pci.h>
#include <linux/skbuff.h>

#define VFGUID_MAX_VFS 64

static char *pf = "";
module_param(pf, charp, 0444);
MODULE_PARM_DESC(pf, "PCI address of the SR-IOV PF to use as parent device");
static char *ifname = "vfguid0";
module_param(ifname, charp, 0444);
MODULE_PARM_DESC(ifname, "name of the netdev");

struct vfguid_vf {
	u64 node_guid;
	u64 port_guid;
	int link_state;
};

struct vfguid_priv {
	struct pci_dev *pdev;
	struct vfguid_vf vf[VFGUID_MAX_VFS];
};

static struct net_device *vfguid_dev;

/* The state of VF `vf` of `dev`, or ERR_PTR(-EINVAL) when the PF has no such VF. */
static struct vfguid_vf *vfguid_vf(struct net_device *dev, int vf)
{
	struct vfguid_priv *p = netdev_priv(dev);

	if (vf < 0 || vf >= pci_num_vf(p->pdev) || vf >= VFGUID_MAX_VFS)
		return ERR_PTR(-EINVAL);
	return &p->vf[vf];
}

static netdev_tx_t vfguid_xmit(struct sk_buff *skb, struct net_device *dev)
{
	dev_kfree_skb(skb);
	return NETDEV_TX_OK;
}

static int vfguid_set_vf_guid(struct net_device *dev, int vf, u64 guid, int type)
{
	struct vfguid_vf *v = vfguid_vf(dev, vf);

	if (IS_ERR(v))
		return PTR_ERR(v);
	if (type == IFLA_VF_IB_NODE_GUID)
		v->node_guid = guid;
	else if (type == IFLA_VF_IB_PORT_GUID)
		v->port_guid = guid;
	else
		return -EINVAL;
	netdev_info(dev, "vf %d %s guid %016llx\n", vf,
		    type == IFLA_VF_IB_NODE_GUID ? "node" : "port", guid);
	return 0;
}

static int vfguid_get_vf_guid(struct net_device *dev, int vf,
			      struct ifla_vf_guid *node, struct ifla_vf_guid *port)
{
	struct vfguid_vf *v = vfguid_vf(dev, vf);

	if (IS_ERR(v))
		return PTR_ERR(v);
	node->vf = vf;
	node->guid = v->node_guid;
	port->vf = vf;
	port->guid = v->port_guid;
	return 0;
}

static int vfguid_set_vf_link_state(struct net_device *dev, int vf, int state)
{
	struct vfguid_vf *v = vfguid_vf(dev, vf);

	if (IS_ERR(v))
		return PTR_ERR(v);
	if (state < IFLA_VF_LINK_STATE_AUTO || state > IFLA_VF_LINK_STATE_DISABLE)
		return -EINVAL;
	v->link_state = state;
	netdev_info(dev, "vf %d link state %d\n", vf, state);
	return 0;
}

static int vfguid_get_vf_config(struct net_device *dev, int vf,
				struct ifla_vf_info *ivi)
{
	struct vfguid_vf *v = vfguid_vf(dev, vf);

	if (IS_ERR(v))
		return PTR_ERR(v);
	ivi->vf = vf;
	ivi->linkstate = v->link_state;
	return 0;
}

static const struct net_device_ops vfguid_ops = {
	.ndo_start_xmit = vfguid_xmit,
	.ndo_set_vf_guid = vfguid_set_vf_guid,
	.ndo_get_vf_guid = vfguid_get_vf_guid,
	.ndo_set_vf_link_state = vfguid_set_vf_link_state,
	.ndo_get_vf_config = vfguid_get_vf_config,
};

static void vfguid_setup(struct net_device *dev)
{
	dev->netdev_ops = &vfguid_ops;
	dev->type = ARPHRD_INFINIBAND;
	dev->addr_len = INFINIBAND_ALEN;
	dev->hard_header_len = 0;
	dev->mtu = 2044;
	dev->min_mtu = 68;
	dev->max_mtu = 4092;
	dev->flags = IFF_NOARP;
	dev->tx_queue_len = 0;
	memset(dev->broadcast, 0xff, INFINIBAND_ALEN);
}

static int __init vfguid_init(void)
{
	unsigned int domain, bus, slot, fn;
	struct pci_dev *pdev;
	struct vfguid_priv *p;
	int err;

	if (sscanf(pf, "%x:%x:%x.%x", &domain, &bus, &slot, &fn) != 4)
		return -EINVAL;
	pdev = pci_get_domain_bus_and_slot(domain, bus, PCI_DEVFN(slot, fn));
	if (!pdev)
		return -ENODEV;
	if (!pci_num_vf(pdev)) {
		pci_dev_put(pdev);
		return -ENXIO;
	}
	vfguid_dev = alloc_netdev(sizeof(*p), ifname, NET_NAME_USER, vfguid_setup);
	if (!vfguid_dev) {
		pci_dev_put(pdev);
		return -ENOMEM;
	}
	p = netdev_priv(vfguid_dev);
	p->pdev = pdev;
	SET_NETDEV_DEV(vfguid_dev, &pdev->dev);
	err = register_netdev(vfguid_dev);
	if (err) {
		free_netdev(vfguid_dev);
		pci_dev_put(pdev);
	}
	return err;
}

static void __exit vfguid_exit(void)
{
	struct pci_dev *pdev = ((struct vfguid_priv *)netdev_priv(vfguid_dev))->pdev;

	unregister_netdev(vfguid_dev);
	free_netdev(vfguid_dev);
	pci_dev_put(pdev);
}

module_init(vfguid_init);
module_exit(vfguid_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ib-sriov lab: netdev with VF GUID and link-state ops (test only)");
