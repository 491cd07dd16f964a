"""A kubelet device plugin (v1beta1) serving the node's cards as Katalyst's GPU-share
resources `nvidia.com/gpu` and `resource.katalyst.kubewharf.io/gpu_memory` (docs/devices.md)."""
