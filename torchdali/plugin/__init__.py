"""Framework plugins (DALI's `nvidia.dali.plugin`): `torchdali.plugin.pytorch`."""
