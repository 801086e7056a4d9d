from petrecords.cli import main

main()
