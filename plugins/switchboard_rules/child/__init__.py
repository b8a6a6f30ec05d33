"""The sandbox's child processes, one mechanism a module (their face: ``sandbox_child``)."""
