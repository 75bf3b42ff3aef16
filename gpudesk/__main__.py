from gpudesk.cli.main import main

main()
