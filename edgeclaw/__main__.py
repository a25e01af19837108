from edgeclaw.cli import main

raise SystemExit(main())
