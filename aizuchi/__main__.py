from aizuchi.cli import main

raise SystemExit(main())
