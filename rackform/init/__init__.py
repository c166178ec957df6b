"""`rackform init`: a new blueprint repository a platform team commits as it is. `repo` says
what is in it (from the templates in `templates/`, each target's blueprint and the engine's
plan of it); `write` puts it on disk without overwriting anything, all or nothing."""
