"""inject: the hook wired into a user's own manifests (CONTRACT §4), beside the advice."""
