from uniform_herding.cli import main

main()
