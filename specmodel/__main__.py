from specmodel.cli import main

main()
