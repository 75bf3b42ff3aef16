from gpudesk.cli.entry import main

main()
