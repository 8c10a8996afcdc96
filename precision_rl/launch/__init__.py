"""Starting runs: verl overrides from a spec, run directories and manifests, supervision, the grid."""
