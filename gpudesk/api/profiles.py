"""Profiles for front ends: read a `profile.toml` (checked, with file:line:key errors) without
importing the parser's home. The desk submits a profile through this module and
`gpudesk.api.submit`, so it never imports anything below the api."""

from gpudesk.profile import Profile, ProfileError, load_profile

__all__ = ["Profile", "ProfileError", "load_profile"]
