"""The local sandbox pod: a private sshd on loopback, a volume folder and a tiny model."""
