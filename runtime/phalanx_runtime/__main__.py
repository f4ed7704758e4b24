from phalanx_runtime.launch import main

raise SystemExit(main())
