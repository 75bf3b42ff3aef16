from gpudesk.cli import main

main()
