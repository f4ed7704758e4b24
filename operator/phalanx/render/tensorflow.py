"""TF_CONFIG, where ``phalanx local`` (phalanx_runtime.local_env) imports it from; the
framework's plugin, phalanx.frameworks.tensorflow, renders it."""

from phalanx.frameworks.tensorflow import tf_cluster, tf_config, tf_config_json, uses_tensorflow

__all__ = ["tf_cluster", "tf_config", "tf_config_json", "uses_tensorflow"]
