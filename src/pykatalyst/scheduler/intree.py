"""The scheduler's in-tree registry: every plugin a configuration may name, by name (as
kube-scheduler's `NewInTreeRegistry`).

One map, one entry per plugin. The configuration loader and the framework are handed this
map (or another a caller builds, e.g. with a plugin of its own); nothing registers itself
on import.
"""

from __future__ import annotations

from pykatalyst.api import names
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import (
    GPUShareArgs,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    NodeResourceTopologyArgs,
    PodTopologySpreadArgs,
    QoSAwareNodeResourcesBalancedAllocationArgs,
    QoSAwareNodeResourcesFitArgs,
    SriovVFArgs,
)
from pykatalyst.scheduler.plugins.gpu import GPUShare
from pykatalyst.scheduler.plugins.interpod import InterPodAffinity
from pykatalyst.scheduler.plugins.nic import NICBandwidth
from pykatalyst.scheduler.plugins.resources import (
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    QoSAwareNodeResourcesBalancedAllocation,
    QoSAwareNodeResourcesFit,
)
from pykatalyst.scheduler.plugins.sriov import SriovVF
from pykatalyst.scheduler.plugins.standard import (
    NodeAffinity,
    NodeName,
    NodeUnschedulable,
    PodTopologySpread,
    TaintToleration,
)
from pykatalyst.scheduler.plugins.topology import NodeResourceTopology
from pykatalyst.scheduler.plugins.upstream import upstream_plugins


def in_tree_registry() -> dict[str, reg.PluginSpec]:
    """A fresh map of every plugin this scheduler knows: name → its entry (class and args
    model, or the reason it decides nothing here)."""
    p = reg.plugin
    # fmt: off
    return {
        **upstream_plugins(),
        reg.NODE_UNSCHEDULABLE: p(reg.NODE_UNSCHEDULABLE, NodeUnschedulable),
        reg.NODE_NAME: p(reg.NODE_NAME, NodeName),
        reg.TAINT_TOLERATION: p(reg.TAINT_TOLERATION, TaintToleration),
        reg.NODE_AFFINITY: p(reg.NODE_AFFINITY, NodeAffinity, NodeAffinityArgs),
        reg.POD_TOPOLOGY_SPREAD: p(reg.POD_TOPOLOGY_SPREAD, PodTopologySpread, PodTopologySpreadArgs),  # noqa: E501
        reg.INTER_POD_AFFINITY: p(reg.INTER_POD_AFFINITY, InterPodAffinity, InterPodAffinityArgs),
        reg.NODE_RESOURCES_FIT: p(reg.NODE_RESOURCES_FIT, NodeResourcesFit, NodeResourcesFitArgs),
        reg.NODE_RESOURCES_BALANCED_ALLOCATION: p(reg.NODE_RESOURCES_BALANCED_ALLOCATION, NodeResourcesBalancedAllocation, NodeResourcesBalancedAllocationArgs),  # noqa: E501
        reg.QOS_FIT: p(reg.QOS_FIT, QoSAwareNodeResourcesFit, QoSAwareNodeResourcesFitArgs),
        reg.QOS_BALANCED: p(reg.QOS_BALANCED, QoSAwareNodeResourcesBalancedAllocation, QoSAwareNodeResourcesBalancedAllocationArgs),  # noqa: E501
        reg.NODE_RESOURCE_TOPOLOGY: p(reg.NODE_RESOURCE_TOPOLOGY, NodeResourceTopology, NodeResourceTopologyArgs),  # noqa: E501
        names.PLUGIN_GPU_SHARE: p(names.PLUGIN_GPU_SHARE, GPUShare, GPUShareArgs),
        names.PLUGIN_NIC_BANDWIDTH: p(names.PLUGIN_NIC_BANDWIDTH, NICBandwidth),
        names.PLUGIN_SRIOV_VF: p(names.PLUGIN_SRIOV_VF, SriovVF, SriovVFArgs),
    }
    # fmt: on
