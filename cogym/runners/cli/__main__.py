from cogym.runners.cli import main

raise SystemExit(main())
