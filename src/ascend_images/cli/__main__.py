from ascend_images.cli.entry import main

main()
