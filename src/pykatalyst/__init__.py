"""pykatalyst: Katalyst QoS colocation for vanilla Kubernetes."""

__version__ = "0.1.0"
