"""The root helpers: small programs run as root through one sudoers rule each."""
