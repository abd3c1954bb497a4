from gossipgrad.cli import main

main()
