"""``python -m sim2real`` entry point."""

try:
    from sim2real.cli import main
except KeyboardInterrupt:  # Ctrl-C before the command line starts: quietly, as main() does after
    raise SystemExit(130) from None

raise SystemExit(main())
