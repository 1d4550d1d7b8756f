"""Apps that the registry tests install for one test with override_settings."""
