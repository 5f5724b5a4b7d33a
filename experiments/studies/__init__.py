"""Studies: experiments that train and then measure (exploit, the arms race, several training seeds and their report)."""
