from enzcc.cli import main

raise SystemExit(main())
