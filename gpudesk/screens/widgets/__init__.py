"""Small widgets the desk's screens share."""
