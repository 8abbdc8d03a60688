"""Configuration: clusters.yaml and settings (pydantic), reload without a restart, ClusterProfile members."""
